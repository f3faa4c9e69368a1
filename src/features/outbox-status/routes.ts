// The organization's outboxes, read-only, for its admins (signed-in users: the route declares no scope).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { problemResponses } from '../../errors.ts'
import { requireUser } from '../../principal.ts'
import { OrganizationOutboxStatus, OutboxStatusQuery } from './schemas.ts'

const outboxStatusRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const outboxStatus = app.services.outboxStatus

  app.get(
    '',
    {
      schema: {
        tags: ['outboxes'],
        operationId: 'getOutboxStatus',
        summary: 'What the organization’s mail and webhook outboxes hold; needs organization admin',
        description:
          'Per outbox, the messages waiting and those given up, then the latest given up (`limit`, ' +
          'default 20) with their last error, newest first. Only the organization’s own messages; the ' +
          'authorization tuple outbox belongs to no organization and is left to operators ' +
          '(`npm run cli -- outbox status`).',
        querystring: OutboxStatusQuery,
        response: { 200: OrganizationOutboxStatus, ...problemResponses(400, 401, 403) },
      },
    },
    async (request) => outboxStatus.read(requireUser(request), request.query.limit ?? 20),
  )
}

export default outboxStatusRoutes
