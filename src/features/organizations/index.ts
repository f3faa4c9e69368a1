// The organizations feature: the tenants themselves and their runtime configuration under
// /api/organizations/{orgId}/config.
import type { FastifyInstance } from 'fastify'
import organizationRoutes from './routes.ts'

export { type ConfigValueRules, ORGANIZATION_CONFIG_CHANNEL, OrganizationConfig } from './config.ts'
export { findOrganization, insertOrganization, listOrganizations } from './repository.ts'
export { createOrganization } from './service.ts'

export default async function organizationsFeature(app: FastifyInstance) {
  await app.register(organizationRoutes, { prefix: '/api/organizations' })
}
