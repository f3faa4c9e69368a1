import type { Config } from '../../config.ts'
import { SCOPES } from '../../scopes.ts'
import type { AccessTokens } from '../../security/tokens.ts'
import type { ServiceAccounts } from '../machine-principals/index.ts'
import type { SessionGate } from '../sessions/index.ts'
import type { OAuthErrorCode } from './schemas.ts'

/** An OAuth 2.0 error answer (RFC 6749 5.2): thrown by this feature, rendered by its error handler. */
export class OAuthError extends Error {
  readonly error: OAuthErrorCode
  readonly status: number
  readonly headers: Record<string, string>
  constructor(
    error: OAuthErrorCode,
    description: string,
    status = 400,
    headers: Record<string, string> = {},
  ) {
    super(description)
    this.error = error
    this.status = status
    this.headers = headers
  }
}

/** The client's credentials as presented, and how (the 401 of a failed Basic one names its scheme). */
export interface ClientCredentials {
  clientId: string
  clientSecret: string
  method: 'client_secret_basic' | 'client_secret_post'
}

export const AUTH_METHODS = ['client_secret_basic', 'client_secret_post'] as const
export const INTROSPECT_SCOPE = 'tokens:introspect'

/** RFC 6749 3.3: scope tokens are printable ASCII without space, `"` or `\`. */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/

const invalidClient = (credentials: ClientCredentials) =>
  new OAuthError(
    'invalid_client',
    'Client authentication failed',
    401,
    credentials.method === 'client_secret_basic'
      ? { 'www-authenticate': 'Basic realm="oauth2", charset="UTF-8"' }
      : {},
  )

interface Deps {
  config: Config
  tokens: AccessTokens
  serviceAccounts: ServiceAccounts
  sessionGate: SessionGate | null
}

/**
 * OAuth 2.0 for machines over the service accounts: the client-credentials grant (the same check
 * and the same token as POST /api/auth/service-token), introspection and the server's metadata.
 */
export class OAuthServer {
  readonly #deps: Deps

  constructor(deps: Deps) {
    this.#deps = deps
  }

  /** The client-credentials grant: a token carrying the requested scopes, or all of the client's. */
  async clientCredentials(credentials: ClientCredentials, requestedScope: string | undefined) {
    const requested = parseScope(requestedScope)
    const client = await this.#deps.serviceAccounts.authenticateClient(
      credentials.clientId,
      credentials.clientSecret,
    )
    if (client.outcome === 'invalid') throw invalidClient(credentials)
    if (client.outcome === 'disabled') {
      throw new OAuthError('unauthorized_client', 'This client is disabled and may not obtain tokens')
    }
    const held = client.account.scopes
    const missing = requested?.filter((scope) => !held.includes(scope)) ?? []
    if (missing.length > 0) {
      throw new OAuthError('invalid_scope', `The client does not hold the scope ${missing.join(' ')}`)
    }
    const granted = requested ?? held
    const issued = this.#deps.serviceAccounts.issueTokenFor(client.account, granted)
    return {
      access_token: issued.token,
      token_type: 'Bearer' as const,
      expires_in: issued.expiresInSeconds,
      scope: granted.join(' '),
    }
  }

  /** Checks the caller of introspection: a service account holding tokens:introspect. */
  async introspectionCaller(credentials: ClientCredentials): Promise<void> {
    const client = await this.#deps.serviceAccounts.authenticateClient(
      credentials.clientId,
      credentials.clientSecret,
    )
    if (client.outcome !== 'authenticated') throw invalidClient(credentials)
    if (!client.account.scopes.includes(INTROSPECT_SCOPE)) {
      throw new OAuthError('insufficient_scope', `Introspection needs the scope ${INTROSPECT_SCOPE}`, 403)
    }
  }

  /**
   * What the API itself would make of the token (RFC 7662): active while its signature, issuer,
   * audience and times hold and, for a service token, its account is active (the token's scopes
   * narrowed to the account's current ones); for a user token, while its session and session
   * version stand where session versions are on. Anything else is `{active: false}`.
   */
  async introspect(token: string) {
    const inactive = { active: false }
    const inspected = this.#deps.tokens.inspect(token)
    if (!inspected) return inactive
    const { payload } = inspected
    const common = {
      active: true,
      sub: inspected.claims.sub,
      exp: payload.exp as number,
      iat: payload.iat as number,
      iss: payload.iss as string,
      aud: payload.aud as string,
      token_type: 'Bearer' as const,
      ...(typeof payload.jti === 'string' ? { jti: payload.jti } : {}),
    }
    if (inspected.kind === 'service') {
      const principal = await this.#deps.serviceAccounts.resolveBearer(token)
      if (!principal) return inactive
      return { ...common, client_id: principal.clientId, scope: [...principal.scopes].join(' ') }
    }
    const gate = this.#deps.sessionGate
    if (gate && !(await gate.admitsAfresh(inspected.claims))) return inactive
    return { ...common, org: inspected.claims.org }
  }

  /** RFC 8414 metadata (and the OpenID discovery document, a superset); null when the issuer is no URL. */
  metadata(openid: boolean) {
    const { config } = this.#deps
    const issuer = config.auth.jwt.issuer
    if (!/^https?:\/\/[^/]/.test(issuer) || !URL.canParse(issuer)) return null
    const base = config.web.publicUrl.replace(/\/+$/, '')
    const algorithm = config.auth.jwt.algorithm
    return {
      issuer,
      token_endpoint: `${base}/oauth2/token`,
      jwks_uri: `${base}/.well-known/jwks.json`,
      introspection_endpoint: `${base}/oauth2/introspect`,
      grant_types_supported: ['client_credentials'],
      token_endpoint_auth_methods_supported: [...AUTH_METHODS],
      introspection_endpoint_auth_methods_supported: [...AUTH_METHODS],
      scopes_supported: [...SCOPES],
      response_types_supported: [],
      ...(openid
        ? { id_token_signing_alg_values_supported: [algorithm], subject_types_supported: ['public'] }
        : {}),
    }
  }
}

/** The requested scopes, deduplicated, or undefined when none were asked for (all are granted). */
function parseScope(scope: string | undefined): string[] | undefined {
  if (scope === undefined || scope.trim() === '') return undefined
  const tokens = scope.split(' ').filter(Boolean)
  if (!tokens.every((token) => SCOPE_TOKEN.test(token))) {
    throw new OAuthError('invalid_scope', 'scope must be space-separated scope tokens')
  }
  return [...new Set(tokens)]
}
