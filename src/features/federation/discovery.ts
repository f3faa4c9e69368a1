import { createHash } from 'node:crypto'
import * as oidc from 'openid-client'
import type { Clock } from '../../clock.ts'
import type { ResolvedProvider } from './providers.ts'

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost'])

/**
 * Why an issuer is not acceptable, or null: issuers are https, except that the development and
 * test profiles accept `http://` on a loopback address (local identity providers and the tests).
 */
export function issuerProblem(issuer: string, allowLoopbackHttp: boolean): string | null {
  let url: URL
  try {
    url = new URL(issuer)
  } catch {
    return `is not a URL: ${issuer}`
  }
  if (url.search || url.hash) return `must have no query or fragment: ${issuer}`
  if (url.protocol === 'https:') return null
  if (url.protocol === 'http:' && allowLoopbackHttp && LOOPBACK.has(url.hostname)) return null
  return allowLoopbackHttp
    ? `must be https (http only on a loopback address): ${issuer}`
    : `must be https: ${issuer}`
}

/** How long a provider's discovery document (and the client built on it) is kept. */
const DISCOVERY_TTL_MS = 60 * 60 * 1000

interface Cached {
  at: number
  configuration: Promise<oidc.Configuration>
}

/**
 * The providers' discovery documents, fetched once and kept for an hour per (issuer, client): the
 * client configuration built on one also keeps the provider's signing keys (refetched by the library
 * when a token names a key it has not seen). A failed discovery is not kept, so the next sign-in
 * tries again. The ID token's signature is checked as well as its claims
 * (`enableNonRepudiationChecks`), though it came straight from the token endpoint.
 */
export class ProviderDiscovery {
  readonly #cache = new Map<string, Cached>()
  readonly #clock: Clock
  readonly #allowLoopbackHttp: boolean

  constructor(deps: { clock: Clock; allowLoopbackHttp: boolean }) {
    this.#clock = deps.clock
    this.#allowLoopbackHttp = deps.allowLoopbackHttp
  }

  configuration(provider: ResolvedProvider): Promise<oidc.Configuration> {
    const key = createHash('sha256')
      .update(JSON.stringify([provider.issuer, provider.clientId, provider.clientSecret]))
      .digest('base64url')
    const now = this.#clock.now().getTime()
    const cached = this.#cache.get(key)
    if (cached && now - cached.at < DISCOVERY_TTL_MS) return cached.configuration
    const configuration = this.#discover(provider)
    this.#cache.set(key, { at: now, configuration })
    configuration.catch(() => {
      if (this.#cache.get(key)?.configuration === configuration) this.#cache.delete(key)
    })
    return configuration
  }

  async #discover(provider: ResolvedProvider): Promise<oidc.Configuration> {
    const problem = issuerProblem(provider.issuer, this.#allowLoopbackHttp)
    if (problem) throw new Error(`issuer ${problem}`)
    const insecure = new URL(provider.issuer).protocol === 'http:'
    const configuration = await oidc.discovery(
      new URL(provider.issuer),
      provider.clientId,
      undefined,
      oidc.ClientSecretPost(provider.clientSecret),
      { execute: insecure ? [oidc.allowInsecureRequests] : [], timeout: 10 },
    )
    oidc.enableNonRepudiationChecks(configuration)
    return configuration
  }
}
