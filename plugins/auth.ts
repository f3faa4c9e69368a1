// Decorates the authentication services (`app.tokens`, `app.passwords`, `app.sessions`,
// `app.authenticator`, `app.events`) and `request.principal`, resolved in onRequest from the
// access cookie; needs config and db. Unknown /api routes answer 401 to unauthenticated callers,
// so the route map is not visible without credentials.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { AppError } from '../src/errors.ts'
import type { EventBus } from '../src/events.ts'
import type { Principal } from '../src/principal.ts'
import { incrementSessionVersion } from '../src/repositories/accounts.ts'
import { AccountAuthenticator, type CredentialAuthenticator } from '../src/services/authentication.ts'
import { PasswordHasher } from '../src/services/passwords.ts'
import { accountSessionVersions, type SessionVersionProvider } from '../src/services/session-version.ts'
import { SessionService } from '../src/services/sessions.ts'
import { AccessTokens } from '../src/services/tokens.ts'

declare module 'fastify' {
  interface FastifyInstance {
    tokens: AccessTokens
    passwords: PasswordHasher
    sessions: SessionService
    authenticator: CredentialAuthenticator
    accountAuthenticator: AccountAuthenticator
    events: EventBus
  }
  interface FastifyRequest {
    principal: Principal | null
  }
}

export interface AuthPluginOptions {
  events: EventBus
  authenticator?: CredentialAuthenticator | undefined
  sessionVersionProvider?: SessionVersionProvider | undefined
}

/** A route or scope hook: 401 AUTHENTICATION_REQUIRED without a principal. */
export async function requireAuthentication(request: FastifyRequest): Promise<void> {
  if (!request.principal)
    throw new AppError('AUTHENTICATION_REQUIRED', 'This endpoint requires authentication')
}

async function authPlugin(app: FastifyInstance, options: AuthPluginOptions) {
  const { config, clock, db } = app
  const { password } = config.auth
  const passwords = await PasswordHasher.create({
    memoryKib: password.hashMemoryKib,
    iterations: password.hashIterations,
    parallelism: password.hashParallelism,
  })
  const tokens = new AccessTokens(config, clock)
  const events = options.events
  events.useLogger(app.log)

  const builtInVersions = config.auth.sessionVersion.enabled ? accountSessionVersions(db) : null
  const versions = options.sessionVersionProvider ?? builtInVersions
  if (builtInVersions) {
    events.on('UserSessionsRevokedEvent', ({ userId }) => incrementSessionVersion(db, userId))
  }

  const accountAuthenticator = new AccountAuthenticator({ db, clock, config, passwords })
  app.decorate('tokens', tokens)
  app.decorate('passwords', passwords)
  app.decorate('events', events)
  app.decorate('accountAuthenticator', accountAuthenticator)
  app.decorate('authenticator', options.authenticator ?? accountAuthenticator)
  app.decorate('sessions', new SessionService({ db, clock, config, tokens, events, versions }))
  app.decorateRequest('principal', null)

  const accessCookie = config.auth.cookie.accessTokenName

  async function userFromCookie(request: FastifyRequest): Promise<Principal | null> {
    const token = request.cookies[accessCookie]
    if (!token) return null
    const claims = tokens.verifyUserToken(token)
    if (!claims) return null
    if (versions) {
      const current = await versions.currentVersion(claims.sub)
      if (current !== null && current !== claims.ver) return null
    }
    return {
      type: 'USER',
      id: claims.sub,
      userId: claims.sub,
      organizationId: claims.org,
      sessionId: claims.sid,
    }
  }

  app.addHook('onRequest', async (request) => {
    request.principal = await userFromCookie(request)
    if (!request.principal && request.is404 && request.url.startsWith('/api/')) {
      throw new AppError('AUTHENTICATION_REQUIRED', 'This endpoint requires authentication')
    }
  })
}

export default fp(authPlugin, { name: 'auth', fastify: '5.x', dependencies: ['config', 'db'] })
