// The example resource, and the template for a team's own: purchase requests under
// /api/purchase-requests with their workflow, history, attachments, approval email and report.
import type { FastifyInstance } from 'fastify'
import type { MailTemplates } from '../../mail/templates.ts'
import type { FileService } from '../files/index.ts'
import { approvalSubjectResolver, approvalTemplate } from './approval.ts'
import purchaseRequestRoutes from './routes.ts'
import { ATTACHMENT_CONTENT_TYPES, type PurchaseRequestDeps, PurchaseRequests } from './service.ts'

export { PurchaseRequests } from './service.ts'

/**
 * Builds the feature's service and binds it to the rest, in one call from the composition root:
 * attachments as the files feature's `purchase_request` resource type, the approval email and its
 * subject read from the organization's configuration when it is sent.
 */
export function createPurchaseRequests(
  deps: PurchaseRequestDeps & {
    files: FileService
    templates: MailTemplates
    configuration: { getValue(organizationId: string, key: string): Promise<string | undefined> }
  },
): PurchaseRequests {
  deps.files.registerResourceType('purchase_request', {
    objectType: 'purchase_request',
    contentTypes: ATTACHMENT_CONTENT_TYPES,
  })
  deps.templates.register('purchase_request_approved', approvalTemplate)
  deps.templates.resolveSubject('purchase_request_approved', approvalSubjectResolver(deps.configuration))
  return new PurchaseRequests(deps)
}

export default async function purchaseRequestsFeature(app: FastifyInstance) {
  await app.register(purchaseRequestRoutes, { prefix: '/api/purchase-requests' })
}
