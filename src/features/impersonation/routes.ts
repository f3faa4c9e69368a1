// Impersonation: an organization admin starts acting as a member (POST /api/users/{id}/impersonation)
// and stops (DELETE /api/impersonation). Starting replaces the admin's session cookies with the
// impersonation session's; stopping revokes it everywhere and gives the admin's own session back.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses } from '../../errors.ts'
import { requireUser } from '../../principal.ts'
import { Uuid } from '../../uuid.ts'
import {
  clearSessionCookies,
  SessionResponse,
  sessionResponse,
  setSessionCookies,
  withSessionCookies,
} from '../sessions/index.ts'
import { StartImpersonationRequest } from './schemas.ts'

const UserParams = Type.Object({ id: Uuid })

const impersonationRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, clock } = app

  app.post(
    '/users/:id/impersonation',
    {
      config: { notWhileImpersonating: true },
      schema: {
        tags: ['users'],
        operationId: 'startImpersonation',
        summary:
          "Act as an active member of the admin's organization; sets the impersonation session's cookies",
        description:
          'Never oneself, another admin, an inactive member or while impersonating (403 ' +
          'IMPERSONATION_FORBIDDEN). An admin with a second factor gives otpCode or passkey unless the ' +
          'session signed in with one less than 5 minutes ago (403 OTP_REQUIRED, 403 INVALID_OTP). The ' +
          "session lasts at most platform.auth.impersonation.max-duration; its tokens carry act.sub, the admin's id.",
        params: UserParams,
        body: StartImpersonationRequest,
        response: {
          200: withSessionCookies(SessionResponse),
          ...problemResponses(400, 401, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const { reason, otpCode, passkey } = request.body
      const session = await app.services.impersonation.start(
        requireUser(request),
        request.params.id,
        { reason, otpCode, passkey },
        { userAgent: request.headers['user-agent'] ?? null, ipAddress: request.ip },
      )
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )

  app.delete(
    '/impersonation',
    {
      config: { mfaEnrolment: true },
      schema: {
        tags: ['authentication'],
        operationId: 'stopImpersonation',
        summary:
          "Stop impersonating: the session is revoked on every instance and the admin's own session is back",
        description:
          "200 with the admin's own session and its cookies; 204 with the cookies cleared when that session " +
          'has ended meanwhile (sign in again). 404 when the caller is not impersonating.',
        response: {
          200: withSessionCookies(SessionResponse),
          204: {
            type: 'null',
            description: "Stopped; the admin's own session has ended, so both cookies are cleared",
          },
          ...problemResponses(401, 403, 404),
        },
      },
    },
    async (request, reply) => {
      const session = await app.services.impersonation.stop(requireUser(request))
      if (!session) {
        clearSessionCookies(reply, config)
        return reply.code(204).send(null)
      }
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )
}

export default impersonationRoutes
