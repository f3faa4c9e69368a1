// Decorates `request.principal`, resolved in onRequest from the request's credential, and is the
// one authentication guard: every route is guarded by its matched config: `public` routes are
// open, all others need a principal, and machine principals need the route's declared scope.
// Unknown paths answer 401 to unauthenticated callers, so the route map is not visible without
// credentials. Needs config and services.
//
// One principal per request:
// - an API-key header or an Authorization header is an explicit credential and wins over the
//   ambient access cookie, which is then ignored; an invalid explicit credential leaves the request
//   unauthenticated (it never falls back to the cookie);
// - both an API key and an Authorization header: ambiguous, the request is unauthenticated;
// - Authorization accepts only `Bearer <service token>`: a user token sent as a bearer token has
//   the user audience and is not accepted, and a service token is never accepted from the cookie.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { AppError } from '../errors.ts'
import type { Principal } from '../principal.ts'
import type { Scope } from '../scopes.ts'
import { enterRequestTenant } from './tenant.ts'

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null
  }
  interface FastifyContextConfig {
    /** Open at the security-chain level: no principal needed, no scope checked. */
    public?: boolean
    /** The scope a machine principal needs; non-public routes without one are for users only. */
    scope?: Scope
    /** Refused to an admin impersonating a user (403 IMPERSONATION_FORBIDDEN): credentials, administration. */
    notWhileImpersonating?: boolean
    /** Second-factor enrolment or signing out: open to members an organization's MFA policy holds back. */
    mfaEnrolment?: boolean
  }
}

async function authPlugin(app: FastifyInstance) {
  const { config } = app
  const { tokens, apiKeys, serviceAccounts, sessionGate, impersonationGate, securityPolicies } = app.services
  app.decorateRequest('principal', null)

  const accessCookie = config.auth.cookie.accessTokenName
  const apiKeyHeader = config.auth.apiKey.headerName.toLowerCase()

  async function userFromCookie(request: FastifyRequest): Promise<Principal | null> {
    const token = request.cookies[accessCookie]
    if (!token) return null
    const claims = tokens.verifyUserToken(token)
    if (!claims) return null
    // An impersonation token is always checked against its session, which stopping revokes.
    const gate = claims.act ? (sessionGate ?? impersonationGate) : sessionGate
    if (gate && !(await gate.admits(claims))) return null
    const principal = {
      type: 'USER' as const,
      id: claims.sub,
      userId: claims.sub,
      organizationId: claims.org,
      sessionId: claims.sid,
    }
    return claims.act ? { ...principal, impersonatorId: claims.act.sub } : principal
  }

  async function resolvePrincipal(request: FastifyRequest): Promise<Principal | null> {
    const apiKey = request.headers[apiKeyHeader]
    const authorization = request.headers.authorization
    if (apiKey !== undefined && authorization !== undefined) return null
    if (apiKey !== undefined) return typeof apiKey === 'string' ? apiKeys.resolve(apiKey) : null
    if (authorization !== undefined) {
      const bearer = /^Bearer ([A-Za-z0-9._~+/=-]+)$/i.exec(authorization)?.[1]
      return bearer ? serviceAccounts.resolveBearer(bearer) : null
    }
    return userFromCookie(request)
  }

  // Asked when a request is about to be refused with 403 (src/http/errors.ts): the caches that
  // resolved the principal are bypassed, and an entry found dead is dropped.
  app.decorate('credentialStillValid', async (request: FastifyRequest) => {
    const principal = request.principal
    if (!principal) return false
    if (principal.type === 'API_KEY') return apiKeys.stillValid(principal.apiKeyId)
    if (principal.type === 'SERVICE_ACCOUNT') return serviceAccounts.stillValid(principal.serviceAccountId)
    const claims = tokens.verifyUserToken(request.cookies[accessCookie] ?? '')
    if (claims === null) return false
    const gate = claims.act ? (sessionGate ?? impersonationGate) : sessionGate
    // Without session versions a user token is valid until it expires, whatever happened since.
    return gate ? gate.admitsAfresh(claims) : true
  })

  // The guard decides from the route the router matched (its `public` and `scope` config), never
  // from the request text: `/%61pi/…`, `/ap%69/…` and absolute-form targets reach the same route
  // and so meet the same rule. Deny by default: a route is open only when it says `public: true`,
  // and a machine principal needs the scope the route declares (none declared: users only). An
  // unmatched request is treated as protected, so without credentials no path, known or not,
  // answers differently from another: the route map stays hidden.
  function guard(request: FastifyRequest, principal: Principal | null): void {
    request.principal = principal
    const route = request.routeOptions.config
    const matched = !request.is404
    if (matched && route.public) return
    if (!principal) throw new AppError('AUTHENTICATION_REQUIRED', 'This endpoint requires authentication')
    if (matched && principal.type !== 'USER' && !(route.scope && principal.scopes.has(route.scope))) {
      throw new AppError(
        'INSUFFICIENT_SCOPE',
        route.scope
          ? `This endpoint needs the scope ${route.scope}`
          : 'This endpoint is for signed-in users only',
      )
    }
    if (matched && route.notWhileImpersonating && principal.type === 'USER' && principal.impersonatorId) {
      throw new AppError('IMPERSONATION_FORBIDDEN', 'This is not allowed while impersonating a user')
    }
  }

  /**
   * The organization's security policies (IP allowlist, required second factor), on every request
   * that needs a principal; cached, so an organization without policies costs a map lookup.
   */
  function enforcePolicies(request: FastifyRequest): Promise<void> | undefined {
    const principal = request.principal
    const route = request.routeOptions.config
    if (!principal || (!request.is404 && route.public)) return undefined
    return securityPolicies.enforce(principal, request.ip, { mfaEnrolment: route.mfaEnrolment === true })
  }

  // One callback-style hook resolves the principal, guards the route and enters the request's
  // tenant context (src/http/tenant.ts), so the rest of the request runs inside that context.
  app.addHook('onRequest', (request, _reply, done) => {
    resolvePrincipal(request)
      .then((principal) => {
        guard(request, principal)
        return enforcePolicies(request)
      })
      .then(() => enterRequestTenant(request, done), done)
  })
}

export default fp(authPlugin, { name: 'auth', fastify: '5.x', dependencies: ['config', 'services'] })
