// Account administration by organization admins: invite, deactivate,
// reactivate, admin-triggered password reset. Checked against the account table, not the
// authorization server.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { problemResponses } from '../../errors.ts'
import { idempotentCreate } from '../../http/idempotency.ts'
import { requireUser } from '../../principal.ts'
import { Empty, InviteUserRequest, UserIdResponse, UserParams, UserStateResponse } from './schemas.ts'

const usersRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '',
    {
      config: {
        idempotent: true,
        rateLimit: [
          { name: 'invite:ip', by: 'ip', max: 'invitePerMinute', window: 'minute' },
          {
            name: 'invite:email',
            by: { field: 'email', caseless: true },
            max: 'invitePerHour',
            window: 'hour',
          },
        ],
      },
      schema: {
        tags: ['users'],
        operationId: 'inviteUser',
        summary: 'Invite a user to the organization: creates the account and emails a single-use link',
        body: InviteUserRequest,
        response: { 202: UserIdResponse, ...problemResponses(401, 403, 409, 429) },
      },
    },
    async (request, reply) => {
      const caller = requireUser(request)
      const { email, organizationId, role = 'member' } = request.body
      const answer = (result: { userId: string }) => ({ status: 202, location: null, body: result })
      return idempotentCreate(request, reply, answer, (along) =>
        app.services.users.invite(caller, { email, organizationId, role }, along),
      )
    },
  )

  app.post(
    '/:id/deactivate',
    {
      schema: {
        tags: ['users'],
        operationId: 'deactivateUser',
        summary: "Deactivate an account of the admin's organization (never deleted); revokes its sessions",
        params: UserParams,
        response: { 200: UserStateResponse, ...problemResponses(401, 403, 404, 409) },
      },
    },
    async (request) => app.services.users.deactivate(requireUser(request), request.params.id),
  )

  app.post(
    '/:id/reactivate',
    {
      schema: {
        tags: ['users'],
        operationId: 'reactivateUser',
        summary: "Reactivate a deactivated account of the admin's organization",
        params: UserParams,
        response: { 200: UserStateResponse, ...problemResponses(401, 403, 404) },
      },
    },
    async (request) => app.services.users.reactivate(requireUser(request), request.params.id),
  )

  app.post(
    '/:id/reset-password',
    {
      schema: {
        tags: ['users'],
        operationId: 'adminResetPassword',
        summary: 'Email the user a password-reset link',
        params: UserParams,
        response: { 202: Empty, ...problemResponses(401, 403, 404) },
      },
    },
    async (request, reply) => {
      await app.services.users.adminReset(requireUser(request), request.params.id)
      return reply.code(202).send({})
    },
  )
}

export default usersRoutes
