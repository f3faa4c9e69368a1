// The impersonation feature: an organization admin acting as one of its members, under
// /api/users/{id}/impersonation and /api/impersonation.
import type { FastifyInstance } from 'fastify'
import impersonationRoutes from './routes.ts'

export { impersonationStartedTemplate } from './notice.ts'
export { Impersonation } from './service.ts'

export default async function impersonationFeature(app: FastifyInstance) {
  await app.register(impersonationRoutes, { prefix: '/api' })
}
