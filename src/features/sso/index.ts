// The single sign-on feature: an organization's OpenID Connect connections and claimed email
// domains under /api/organizations/current/sso (admins), the DNS proof of a domain, and the rule
// that keeps a verified-domain member of an organization that requires SSO on its connection.
import type { FastifyInstance } from 'fastify'
import ssoAdminRoutes from './routes.ts'

export { txtLookup } from './domains.ts'
export { SSO_REQUIRED_KEY, ssoConfigRules, ssoRequirement } from './policy.ts'
export { SsoAdministration } from './service.ts'

export default async function ssoFeature(app: FastifyInstance) {
  await app.register(ssoAdminRoutes, { prefix: '/api/organizations/current/sso' })
}
