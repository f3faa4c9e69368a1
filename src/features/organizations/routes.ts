// Per-organization configuration: members of the organization read its entries, admins write them.
// The service checks the relation on `organization:<orgId>`, so another organization's id is 403
// ACCESS_DENIED. Deleting a key that is not set is 204 too:
// the outcome the caller asked for, no override, holds.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { problemResponses } from '../../errors.ts'
import { requirePrincipal } from '../../principal.ts'
import {
  ConfigEntry,
  ConfigEntryList,
  ConfigEntryParams,
  ConfigWriteQuery,
  NoContent,
  OrganizationParams,
  PutConfigRequest,
  toConfigEntry,
} from './schemas.ts'

const organizationsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(ConfigEntry)

  app.get(
    '/:orgId/config',
    {
      config: { scope: 'config:read' },
      schema: {
        tags: ['configuration'],
        operationId: 'listOrganizationConfig',
        summary: "The organization's configuration entries; needs membership of the organization",
        params: OrganizationParams,
        response: { 200: ConfigEntryList, ...problemResponses(401, 403, 503) },
      },
    },
    async (request) => ({
      items: (await app.services.orgConfig.list(requirePrincipal(request), request.params.orgId)).map(
        toConfigEntry,
      ),
    }),
  )

  app.put(
    '/:orgId/config/:key',
    {
      config: { scope: 'config:write' },
      schema: {
        tags: ['configuration'],
        operationId: 'putOrganizationConfig',
        summary:
          'Store a configuration value (created or replaced); it applies at once; needs organization admin',
        description:
          'Keys under `security.` are typed: an unknown one or an invalid value is 400. ' +
          '`security.ip-allowlist` leaving out the address of the request is 409 IP_NOT_ALLOWED unless ' +
          'the request says `?confirm=true`.',
        params: ConfigEntryParams,
        querystring: ConfigWriteQuery,
        body: PutConfigRequest,
        response: { 200: ConfigEntry, ...problemResponses(400, 401, 403, 409, 503) },
      },
    },
    async (request) => {
      const { orgId, key } = request.params
      return toConfigEntry(
        await app.services.orgConfig.put(requirePrincipal(request), orgId, key, request.body.value, {
          clientIp: request.ip,
          confirmed: request.query.confirm === true,
        }),
      )
    },
  )

  app.delete(
    '/:orgId/config/:key',
    {
      config: { scope: 'config:write' },
      schema: {
        tags: ['configuration'],
        operationId: 'deleteOrganizationConfig',
        summary: 'Remove a configuration value (204 also when it was not set); needs organization admin',
        params: ConfigEntryParams,
        response: { 204: NoContent, ...problemResponses(401, 403, 503) },
      },
    },
    async (request, reply) => {
      await app.services.orgConfig.delete(requirePrincipal(request), request.params.orgId, request.params.key)
      return reply.code(204).send(null)
    },
  )
}

export default organizationsRoutes
