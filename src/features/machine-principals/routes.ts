// The API keys of the caller's organization, managed by its admins. Signed-in users only: the
// routes declare no scope, so no API key or service account reaches them, whatever it holds.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses, validationFailed } from '../../errors.ts'
import { refuseWhileImpersonating } from '../../http/impersonation.ts'
import { requireUser } from '../../principal.ts'
import { ApiKeyCursor } from './repository.ts'
import { ApiKey, ApiKeyListQuery, ApiKeyPage, ApiKeyParams, CreateApiKey, CreatedApiKey } from './schemas.ts'

const tags = ['api-keys']

/** An instant the schema accepted as date-time that a Date can also hold (a leap second cannot). */
function instant(text: string | undefined): Date | null {
  if (text === undefined) return null
  const date = new Date(text)
  if (Number.isNaN(date.getTime())) throw validationFailed('body.expiresAt', 'is not a valid instant')
  return date
}

const apiKeyRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(ApiKey)
  const apiKeys = app.services.apiKeys
  refuseWhileImpersonating(app, { reads: true })

  app.get(
    '',
    {
      schema: {
        tags,
        operationId: 'listApiKeys',
        summary: 'The organization’s API keys, newest first (keyset paging); needs organization admin',
        querystring: ApiKeyListQuery,
        response: { 200: ApiKeyPage, ...problemResponses(400, 401, 403) },
      },
    },
    async (request) => {
      const { limit, cursor, state } = request.query
      const page = await apiKeys.pageByAdmin(requireUser(request), {
        limit: limit ?? 50,
        state,
        after: cursor === undefined ? undefined : ApiKeyCursor.decode(cursor),
      })
      return { items: page.items, nextCursor: page.next ? ApiKeyCursor.encode(page.next) : null }
    },
  )

  app.post(
    '',
    {
      schema: {
        tags,
        operationId: 'createApiKey',
        summary: 'Create an API key; the raw key is in this answer only; needs organization admin',
        description:
          'Any scope may be granted. The key is a member of the organization, and an admin when it ' +
          'holds a `*:write` scope; records `api_key.created` with the admin as actor.',
        body: CreateApiKey,
        response: { 201: CreatedApiKey, ...problemResponses(400, 401, 403) },
      },
    },
    async (request, reply) => {
      const { description, scopes, expiresAt } = request.body
      const created = await apiKeys.createByAdmin(requireUser(request), {
        description,
        scopes,
        expiresAt: instant(expiresAt),
      })
      return reply.code(201).header('location', `/api/api-keys/${created.id}`).send(created)
    },
  )

  app.get(
    '/:id',
    {
      schema: {
        tags,
        operationId: 'getApiKey',
        summary: 'One API key of the organization; needs organization admin',
        params: ApiKeyParams,
        response: { 200: Type.Ref('ApiKey'), ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => apiKeys.getByAdmin(requireUser(request), request.params.id),
  )

  app.delete(
    '/:id',
    {
      schema: {
        tags,
        operationId: 'revokeApiKey',
        summary: 'Revoke an API key: refused at once by every instance; needs organization admin',
        description:
          'Revoking a revoked key answers 204 again and records nothing more. A key of another ' +
          'organization is not found.',
        params: ApiKeyParams,
        response: {
          204: Type.Null({ description: 'Revoked' }),
          ...problemResponses(400, 401, 403, 404),
        },
      },
    },
    async (request, reply) => {
      await apiKeys.revokeByAdmin(requireUser(request), request.params.id)
      return reply.code(204).send(null)
    },
  )
}

export default apiKeyRoutes
