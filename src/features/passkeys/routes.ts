// The passkey endpoints under /api/auth/passkeys: a signed-in user's registration and list,
// rename and removal of their own passkeys; the public sign-in ceremony, whose answer is a
// password login's (the session body, the cookie pair, the new-device notice).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses } from '../../errors.ts'
import { requireUser } from '../../principal.ts'
import {
  PasskeyAssertionBody,
  SessionResponse,
  sessionResponse,
  setSessionCookies,
  withSessionCookies,
} from '../sessions/index.ts'
import {
  AuthenticationOptions,
  AuthenticationOptionsRequest,
  CreationOptions,
  PasskeyList,
  PasskeyParams,
  PasskeyRecord,
  RegistrationRequest,
  RenameRequest,
} from './schemas.ts'

const tags = ['passkeys']

const passkeyRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, clock } = app
  const passkeys = app.services.passkeys

  app.post(
    '/registration/options',
    {
      config: { notWhileImpersonating: true, mfaEnrolment: true },
      schema: {
        tags,
        operationId: 'passkeyRegistrationOptions',
        summary:
          'Start adding a passkey to the signed-in account: the options for navigator.credentials.create',
        description:
          'A resident key and user verification are required, attestation is none, and the account’s passkeys are excluded. ' +
          'The challenge belongs to the calling session, is used once and expires after platform.auth.passkeys.challenge-ttl.',
        response: { 200: CreationOptions, ...problemResponses(401, 403) },
      },
    },
    async (request) => ({ ...(await passkeys.registrationOptions(requireUser(request))) }),
  )

  app.post(
    '/registration',
    {
      config: { notWhileImpersonating: true, mfaEnrolment: true },
      schema: {
        tags,
        operationId: 'registerPasskey',
        summary: 'Finish adding a passkey: verify the authenticator’s answer and keep it',
        body: RegistrationRequest,
        response: {
          201: PasskeyRecord,
          ...problemResponses(400, 401, 403, 409),
        },
      },
    },
    async (request, reply) => {
      const record = await passkeys.register(
        requireUser(request),
        request.body.response as never,
        request.body.name,
      )
      return reply.code(201).header('location', `/api/auth/passkeys/${record.id}`).send(record)
    },
  )

  app.get(
    '',
    {
      config: { mfaEnrolment: true },
      schema: {
        tags,
        operationId: 'listPasskeys',
        summary: 'The signed-in user’s passkeys',
        response: { 200: PasskeyList, ...problemResponses(401, 403) },
      },
    },
    async (request) => ({ items: await passkeys.list(requireUser(request)) }),
  )

  app.patch(
    '/:passkeyId',
    {
      config: { notWhileImpersonating: true },
      schema: {
        tags,
        operationId: 'renamePasskey',
        summary: 'Rename one of the signed-in user’s passkeys (another user’s: 404)',
        params: PasskeyParams,
        body: RenameRequest,
        response: { 200: PasskeyRecord, ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => passkeys.rename(requireUser(request), request.params.passkeyId, request.body.name),
  )

  app.delete(
    '/:passkeyId',
    {
      config: { notWhileImpersonating: true },
      schema: {
        tags,
        operationId: 'removePasskey',
        summary:
          'Remove one of the signed-in user’s passkeys (another user’s: 404); a security email says so',
        params: PasskeyParams,
        response: { 204: Type.Null({ description: 'Removed' }), ...problemResponses(401, 403, 404) },
      },
    },
    async (request, reply) => {
      await passkeys.remove(requireUser(request), request.params.passkeyId)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/authentication/options',
    {
      config: {
        public: true,
        rateLimit: [
          { name: 'passkey-options:ip', by: 'ip', max: 'passkeyOptionsPerMinute', window: 'minute' },
        ],
      },
      schema: {
        tags,
        operationId: 'passkeyAuthenticationOptions',
        summary: 'Start a passkey sign-in: the options for navigator.credentials.get and their challengeId',
        description:
          'Without a username any passkey may answer (usernameless, conditional UI). With one, the account’s passkeys are ' +
          'allowed; an unknown username gets options that look the same. The challenge is used once and expires after ' +
          'platform.auth.passkeys.challenge-ttl.',
        body: AuthenticationOptionsRequest,
        response: { 200: AuthenticationOptions, ...problemResponses(429) },
      },
    },
    async (request) => {
      const { challengeId, options } = await passkeys.authenticationOptions(request.body.username)
      return { challengeId, options: { ...options } }
    },
  )

  app.post(
    '/authentication',
    {
      config: {
        public: true,
        // The login's limits: failures per client address, attempts per credential.
        rateLimit: [
          { name: 'login:ip', by: 'ip', max: 'loginPerMinute', window: 'minute', failuresOnly: true },
          {
            name: 'passkey:credential',
            by: { field: 'response.id' },
            max: 'loginPerMinute',
            window: 'minute',
          },
        ],
      },
      schema: {
        tags,
        operationId: 'signInWithPasskey',
        summary:
          'Sign in with a passkey alone (it is two factors: a device and its user verification); sets the session cookies',
        body: PasskeyAssertionBody,
        response: { 200: withSessionCookies(SessionResponse), ...problemResponses(401, 403, 429) },
      },
    },
    async (request, reply) => {
      const user = await passkeys.authenticate(request.body as never)
      const client = { userAgent: request.headers['user-agent'] ?? null, ipAddress: request.ip }
      const session = await app.services.sessions.start(user, client, 'passkey')
      app.background.run('new-device-check', () => app.services.newDeviceNotice.onLogin(user.userId, client))
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )
}

export default passkeyRoutes
