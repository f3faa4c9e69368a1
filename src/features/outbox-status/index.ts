// The outbox-status feature: what the organization's mail and webhook outboxes hold, and their dead
// letters, under /api/outbox-status for its admins (the CLI's `outbox status` covers every outbox).
import type { FastifyInstance } from 'fastify'
import outboxStatusRoutes from './routes.ts'

export { OutboxStatus } from './service.ts'

export default async function outboxStatusFeature(app: FastifyInstance) {
  await app.register(outboxStatusRoutes, { prefix: '/api/outbox-status' })
}
