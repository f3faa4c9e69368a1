// The webhooks feature: an organization's endpoints under /api/webhooks, the messages its audit
// events become (fan-out.ts, written with each event), and their signed delivery (delivery.ts).
import type { FastifyInstance } from 'fastify'
import webhookRoutes from './routes.ts'

export type { Resolve } from './address-guard.ts'
export { WEBHOOK_MAX_ATTEMPTS, WebhookOutboxWorker, webhookRetryDelayMs } from './delivery.ts'
export { TEST_EVENT_TYPE, webhookFanOut } from './fan-out.ts'
export { webhookDisabledTemplate } from './notice.ts'
export { webhookDeliveryRetention } from './retention.ts'
export { Webhooks } from './service.ts'
export { signatureHeader } from './signing.ts'

export default async function webhooksFeature(app: FastifyInstance) {
  await app.register(webhookRoutes, { prefix: '/api/webhooks' })
}
