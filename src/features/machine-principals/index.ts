// The machine principals feature: API keys and service accounts, resolved from their credentials on
// every request and cached briefly. Service accounts are created by the CLI; API keys by the CLI
// and by an organization's admins under /api/api-keys.
import type { FastifyInstance } from 'fastify'
import apiKeyRoutes from './routes.ts'

export { ApiKeys, lastUseFlush, ServiceAccounts } from './service.ts'

export default async function machinePrincipalsFeature(app: FastifyInstance) {
  await app.register(apiKeyRoutes, { prefix: '/api/api-keys' })
}
