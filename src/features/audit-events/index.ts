// The audit-events feature: an organization's audit trail under /api/audit-events (the events are
// recorded by every feature through src/audit).
import type { FastifyInstance } from 'fastify'
import auditRoutes from './routes.ts'

export { AuditEvents } from './service.ts'

export default async function auditEventsFeature(app: FastifyInstance) {
  await app.register(auditRoutes, { prefix: '/api/audit-events' })
}
