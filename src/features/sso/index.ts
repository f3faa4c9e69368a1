// The single sign-on feature: an organization's OpenID Connect connections and claimed email
// domains under /api/organizations/current/sso (admins), the DNS proof of a domain, identity-first
// sign-in (/api/auth/sso/start) through the OpenID Connect flow with a connection as its provider,
// and the rule that keeps a verified-domain member of an organization that requires SSO on it.
import type { FastifyInstance } from 'fastify'
import ssoAdminRoutes, { ssoStartRoutes } from './routes.ts'

export { CONNECTION_KIND } from '../federation/index.ts'
export { txtLookup } from './domains.ts'
export { SSO_REQUIRED_KEY, ssoRequirement } from './policy.ts'
export { SsoAdministration } from './service.ts'
export { ConnectionSignIns } from './sign-in.ts'

export default async function ssoFeature(app: FastifyInstance) {
  await app.register(ssoAdminRoutes, { prefix: '/api/organizations/current/sso' })
  await app.register(ssoStartRoutes, { prefix: '/api/auth/sso' })
}
