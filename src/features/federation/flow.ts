import { timingSafeEqual } from 'node:crypto'
import type { Kysely } from 'kysely'
import * as oidc from 'openid-client'
import type { Clock } from '../../clock.ts'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { newOpaqueToken, sha256 } from '../../security/tokens.ts'
import type { ProviderDiscovery } from './discovery.ts'
import {
  type FederationRegistry,
  formatRef,
  type ProviderRef,
  parseRef,
  type ResolvedProvider,
  type VerifiedIdentity,
} from './providers.ts'
import { findFlow, insertFlow, type OidcFlowRow, takeFlow } from './repository.ts'

/** An authorization request lives this long: its cookie's max-age, and the row's expiry. */
export const FLOW_TTL_SECONDS = 600
/** How long a provider sign-in waits for the account's second factor. */
export const SECOND_FACTOR_TTL_SECONDS = 300

/** What a flow is started for: a sign-in, or linking an identity to a signed-in session's account. */
export type FlowBinding = { purpose: 'sign_in' } | { purpose: 'link'; accountId: string; sessionId: string }

/** A finished flow: the identity the provider vouched for, and what the flow was started for. */
export interface FinishedFlow {
  identity: VerifiedIdentity
  binding: FlowBinding
}

export interface OidcFlowDeps {
  db: Kysely<Database>
  clock: Clock
  registry: FederationRegistry
  discovery: ProviderDiscovery
  /** `<public-url>/api/auth/oidc/callback`: the one redirect URI of every provider and connection. */
  redirectUri: string
}

const stateInvalid = () =>
  new AppError(
    'OIDC_STATE_INVALID',
    'This sign-in was not started in this browser, has expired or was already used: start again',
  )

const sameText = (a: string, b: string) => {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && timingSafeEqual(left, right)
}

/** True for the values providers use to say yes: Entra's `xms_edov` may come as a string. */
const isTrue = (value: unknown) => value === true || value === 'true' || value === '1' || value === 1

/**
 * The relying party's authorization code flow (with PKCE S256), for any provider the registry
 * resolves. `start` stores the flow (state, nonce, code verifier, provider reference and what it is
 * for) under the hash of a random handle that the caller sets as an httpOnly cookie of at most
 * ten minutes; `finish` takes the row back by that cookie (deleting it: one use), requires the
 * callback's `state` to match, and lets openid-client check the rest: the RFC 9207 `iss`
 * parameter when the provider advertises it, the code exchange with the verifier, and the ID
 * token's signature (never `alg: none`), `iss`, `aud`, `exp` and `nonce`.
 */
export class OidcFlow {
  readonly #deps: OidcFlowDeps

  constructor(deps: OidcFlowDeps) {
    this.#deps = deps
  }

  /** The provider's authorization URL to redirect to, and the handle for the browser's cookie. */
  async start(ref: ProviderRef, binding: FlowBinding): Promise<{ redirectUrl: string; handle: string }> {
    const { db, clock, registry, redirectUri } = this.#deps
    const provider = await registry.resolve(ref)
    const configuration = await this.#configuration(provider)
    const codeVerifier = oidc.randomPKCECodeVerifier()
    const state = oidc.randomState()
    const nonce = oidc.randomNonce()
    const handle = newOpaqueToken()
    const now = clock.now()
    await insertFlow(db, {
      handle_hash: handle.hash,
      purpose: binding.purpose,
      provider_ref: formatRef(ref),
      state,
      nonce,
      code_verifier: codeVerifier,
      account_id: binding.purpose === 'link' ? binding.accountId : null,
      session_id: binding.purpose === 'link' ? binding.sessionId : null,
      created_at: now,
      expires_at: new Date(now.getTime() + FLOW_TTL_SECONDS * 1000),
    })
    const url = oidc.buildAuthorizationUrl(configuration, {
      redirect_uri: redirectUri,
      response_type: 'code',
      scope: [...new Set(['openid', ...provider.scopes])].join(' '),
      state,
      nonce,
      code_challenge: await oidc.calculatePKCECodeChallenge(codeVerifier),
      code_challenge_method: 'S256',
    })
    return { redirectUrl: url.href, handle: handle.raw }
  }

  /**
   * Finishes the flow the cookie names with the callback's query string. 400 OIDC_STATE_INVALID
   * without a live flow for the cookie or with another `state`; 401 OIDC_RESPONSE_INVALID for
   * whatever the provider's answer fails (an error answer, a missing or wrong `iss`, the code
   * exchange, the ID token).
   */
  async finish(handle: string | undefined, query: string): Promise<FinishedFlow> {
    const { db, clock, registry, redirectUri } = this.#deps
    if (!handle) throw stateInvalid()
    const flow = await takeFlow(db, sha256(handle), ['sign_in', 'link'])
    if (!flow || flow.expires_at.getTime() <= clock.now().getTime()) throw stateInvalid()
    const callback = new URL(redirectUri)
    callback.search = query
    const state = callback.searchParams.get('state')
    if (!flow.state || state === null || !sameText(state, flow.state)) throw stateInvalid()
    const ref = parseRef(flow.provider_ref)
    if (!ref) throw stateInvalid()
    const provider = await registry.resolve(ref)
    const configuration = await this.#configuration(provider)
    let claims: Record<string, unknown>
    try {
      const tokens = await oidc.authorizationCodeGrant(configuration, callback, {
        pkceCodeVerifier: flow.code_verifier ?? '',
        expectedState: flow.state,
        expectedNonce: flow.nonce ?? '',
        idTokenExpected: true,
      })
      claims = { ...(tokens.claims() ?? {}) }
    } catch (error) {
      throw new AppError(
        'OIDC_RESPONSE_INVALID',
        `The identity provider's answer was refused: ${reason(error)}`,
        {
          cause: error,
        },
      )
    }
    return { identity: identityOf(ref, provider, claims), binding: bindingOf(flow) }
  }

  /** Keeps a provider sign-in waiting for the account's second factor; returns the cookie's handle. */
  async holdForSecondFactor(ref: ProviderRef, accountId: string): Promise<string> {
    const { db, clock } = this.#deps
    const handle = newOpaqueToken()
    const now = clock.now()
    await insertFlow(db, {
      handle_hash: handle.hash,
      purpose: 'second_factor',
      provider_ref: formatRef(ref),
      state: null,
      nonce: null,
      code_verifier: null,
      account_id: accountId,
      session_id: null,
      created_at: now,
      expires_at: new Date(now.getTime() + SECOND_FACTOR_TTL_SECONDS * 1000),
    })
    return handle.raw
  }

  /** The waiting sign-in the cookie names, left in place; 400 OIDC_STATE_INVALID when there is none. */
  async peekSecondFactor(handle: string | undefined): Promise<{ ref: ProviderRef; accountId: string }> {
    if (!handle) throw stateInvalid()
    const held = await findFlow(this.#deps.db, sha256(handle), 'second_factor', this.#deps.clock.now())
    const ref = held ? parseRef(held.provider_ref) : null
    if (!held?.account_id || !ref) throw stateInvalid()
    return { ref, accountId: held.account_id }
  }

  /** Takes the waiting sign-in the cookie names (once); 400 OIDC_STATE_INVALID when there is none. */
  async takeSecondFactor(handle: string | undefined): Promise<{ ref: ProviderRef; accountId: string }> {
    const { db, clock } = this.#deps
    if (!handle) throw stateInvalid()
    const held = await takeFlow(db, sha256(handle), ['second_factor'])
    if (!held || held.expires_at.getTime() <= clock.now().getTime() || !held.account_id) throw stateInvalid()
    const ref = parseRef(held.provider_ref)
    if (!ref) throw stateInvalid()
    return { ref, accountId: held.account_id }
  }

  async #configuration(provider: ResolvedProvider): Promise<oidc.Configuration> {
    try {
      return await this.#deps.discovery.configuration(provider)
    } catch (error) {
      throw new AppError('SERVICE_UNAVAILABLE', 'The identity provider cannot be reached; try again later', {
        cause: error,
      })
    }
  }
}

/** The library's reason, without anything the provider sent back verbatim beyond its error code. */
function reason(error: unknown): string {
  if (error instanceof oidc.AuthorizationResponseError) return `the provider answered ${error.error}`
  if (error instanceof oidc.ResponseBodyError) return `the token endpoint answered ${error.error}`
  // openid-client wraps the check that failed (oauth4webapi's, naming the claim) in a general error.
  let inner: unknown = error
  while (inner instanceof Error && inner.cause instanceof Error) inner = inner.cause
  return inner instanceof Error ? inner.message : 'unknown error'
}

function identityOf(
  ref: ProviderRef,
  provider: ResolvedProvider,
  claims: Record<string, unknown>,
): VerifiedIdentity {
  const email = typeof claims.email === 'string' && claims.email.includes('@') ? claims.email.trim() : null
  return {
    ref,
    provider,
    issuer: String(claims.iss),
    subject: String(claims.sub),
    email,
    emailVerified: email !== null && isTrue(claims[provider.emailVerifiedClaim]),
    claims,
  }
}

function bindingOf(flow: OidcFlowRow): FlowBinding {
  if (flow.purpose === 'link' && flow.account_id && flow.session_id) {
    return { purpose: 'link', accountId: flow.account_id, sessionId: flow.session_id }
  }
  return { purpose: 'sign_in' }
}
