// The permission check (POST /api/authz/check): answers whether the caller has a relation on an object.
// It never answers 403 for a denied permission: denied is `{allowed: false}`.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses, validationFailed } from '../../errors.ts'
import { requirePrincipal } from '../../principal.ts'

const Identifier = Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z][a-z0-9_]*$' })

const CheckRequest = Type.Object(
  {
    relation: Identifier,
    objectType: Identifier,
    // No control characters: PostgreSQL text refuses NUL, and no object id needs the others.
    objectId: Type.String({ minLength: 1, maxLength: 256, pattern: '^[^\\s#:*\\x00-\\x1f\\x7f]+$' }),
  },
  {
    additionalProperties: false,
    $id: 'PermissionCheckRequest',
    title: 'PermissionCheckRequest',
    description: 'The relation to check on objectType:objectId, for the caller',
  },
)

const PermissionCheck = Type.Object(
  { allowed: Type.Boolean() },
  { $id: 'PermissionCheck', title: 'PermissionCheck', description: 'Whether the caller has the relation' },
)

const authzRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/check',
    {
      config: { scope: 'authz:check' },
      schema: {
        tags: ['authorization'],
        operationId: 'checkPermission',
        summary: 'Whether the caller has the relation on the object (false when denied, never 403)',
        body: CheckRequest,
        response: { 200: PermissionCheck, ...problemResponses(401, 403, 503) },
      },
    },
    async (request) => {
      const principal = requirePrincipal(request)
      const { relation, objectType, objectId } = request.body
      if (!app.authz.model.hasType(objectType)) {
        throw validationFailed(
          'body.objectType',
          'is not a type of the authorization model',
          `Unknown object type ${objectType}`,
        )
      }
      if (!app.authz.model.hasRelation(objectType, relation)) {
        throw validationFailed(
          'body.relation',
          `is not a relation of ${objectType}`,
          `Unknown relation ${relation} on ${objectType}`,
        )
      }
      return { allowed: await app.authz.check(principal, relation, `${objectType}:${objectId}`) }
    },
  )
}

export default authzRoutes
