// Sign-in through OpenID Connect providers: the relying party's flow (src/features/federation/flow.ts),
// the registry of provider kinds other features plug into (providers.ts), and the identities
// linked to accounts, keyed by (issuer, subject).
import type { FastifyInstance } from 'fastify'
import { identityRoutes, oidcRoutes } from './routes.ts'

export { ProviderDiscovery } from './discovery.ts'
export { type FinishedFlow, FLOW_TTL_SECONDS, type FlowBinding, OidcFlow } from './flow.ts'
export {
  type EmailVerifiedClaim,
  FederationRegistry,
  formatRef,
  type ProviderKind,
  type ProviderRef,
  parseRef,
  type ResolvedProvider,
  type SignInTarget,
  type VerifiedIdentity,
} from './providers.ts'
export { oidcFlowRetention } from './retention.ts'
/** The flow cookie's name, and its setter: a route that starts a flow of its own (returning JSON) sets it too. */
export { FLOW_COOKIE, setFlowCookie } from './routes.ts'
export { type CallbackOutcome, CONNECTION_KIND, FederatedSignIns } from './service.ts'

export default async function federationFeature(app: FastifyInstance) {
  await app.register(oidcRoutes, { prefix: '/api/auth/oidc' })
  await app.register(identityRoutes, { prefix: '/api/account/identities' })
}
