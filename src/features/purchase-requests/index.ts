// The example resource, and the template for a team's own: purchase requests under
// /api/purchase-requests with their workflow, history, attachments, approval email and report.
import type { FastifyInstance } from 'fastify'
import purchaseRequestRoutes from './routes.ts'

export { approvalSubjectResolver } from './approval.ts'
export { ATTACHMENT_CONTENT_TYPES, PurchaseRequests } from './service.ts'

export default async function purchaseRequestsFeature(app: FastifyInstance) {
  await app.register(purchaseRequestRoutes, { prefix: '/api/purchase-requests' })
}
