// Account administration by organization admins: list, invite, role change, unlock, resend an
// invitation, deactivate, reactivate, admin-triggered password reset. Checked against the account
// table, not the authorization server.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Static } from '@sinclair/typebox'
import { problemResponses } from '../../errors.ts'
import { idempotentCreate } from '../../http/idempotency.ts'
import { refuseWhileImpersonating } from '../../http/impersonation.ts'
import { requireUser } from '../../principal.ts'
import { UserCursor, type UserItemRow } from './repository.ts'
import {
  Empty,
  InviteUserRequest,
  User,
  UserIdResponse,
  UserListQuery,
  UserPage,
  UserParams,
  UserRoleChange,
  UserStateResponse,
} from './schemas.ts'

/** The one mapping from an account, as admins list it, to the API's shape. */
export function toUser(row: UserItemRow): Static<typeof User> {
  return {
    id: row.id,
    email: row.email,
    role: row.role,
    status: row.status,
    lockedUntil: row.locked_until?.toISOString() ?? null,
    otpEnabled: row.otp_enabled,
    passkeyCount: row.passkey_count,
    createdAt: row.created_at.toISOString(),
  }
}

const usersRoutes: FastifyPluginAsyncTypebox = async (app) => {
  // Administration is the admin's own: never done while acting as someone else.
  refuseWhileImpersonating(app, { reads: true })
  app.get(
    '',
    {
      schema: {
        tags: ['users'],
        operationId: 'listUsers',
        summary: "The accounts of the admin's organization, by email (keyset paging), of one status or all",
        querystring: UserListQuery,
        response: { 200: UserPage, ...problemResponses(400, 401, 403) },
      },
    },
    async (request) => {
      const { limit, cursor, status } = request.query
      const page = await app.services.users.list(requireUser(request), {
        limit: limit ?? 50,
        status,
        after: cursor === undefined ? undefined : UserCursor.decode(cursor),
      })
      return { items: page.items.map(toUser), nextCursor: page.next ? UserCursor.encode(page.next) : null }
    },
  )

  app.patch(
    '/:id',
    {
      schema: {
        tags: ['users'],
        operationId: 'changeUserRole',
        summary:
          "Give an account of the admin's organization another role (409 LAST_ADMIN for the last active admin)",
        params: UserParams,
        body: UserRoleChange,
        response: { 200: User, ...problemResponses(400, 401, 403, 404, 409) },
      },
    },
    async (request) =>
      toUser(await app.services.users.changeRole(requireUser(request), request.params.id, request.body.role)),
  )

  app.post(
    '/:id/unlock',
    {
      schema: {
        tags: ['users'],
        operationId: 'unlockUser',
        summary: 'End the lockout after failed sign-ins now (an account that is not locked is left as it is)',
        params: UserParams,
        response: { 200: User, ...problemResponses(401, 403, 404) },
      },
    },
    async (request) => toUser(await app.services.users.unlock(requireUser(request), request.params.id)),
  )

  app.post(
    '/:id/resend-invitation',
    {
      // The invitations' per-IP allowance: one counter with POST /api/users.
      config: { rateLimit: [{ name: 'invite:ip', by: 'ip', max: 'invitePerMinute', window: 'minute' }] },
      schema: {
        tags: ['users'],
        operationId: 'resendInvitation',
        summary: 'Email an invitee that has not accepted yet a fresh link; the older one stops working',
        params: UserParams,
        response: { 202: UserIdResponse, ...problemResponses(401, 403, 404, 409, 429) },
      },
    },
    async (request, reply) => {
      const result = await app.services.users.resendInvitation(requireUser(request), request.params.id)
      return reply.code(202).send(result)
    },
  )

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
