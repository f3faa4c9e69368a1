import { createHash } from 'node:crypto'
import * as oidc from 'openid-client'
import type { Clock } from '../../clock.ts'
import { type Config, oidcIssuerProblem } from '../../config.ts'
import type { ResolvedProvider } from './providers.ts'

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
  readonly #profile: Config['profile']

  constructor(deps: { clock: Clock; profile: Config['profile'] }) {
    this.#clock = deps.clock
    this.#profile = deps.profile
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
    const problem = oidcIssuerProblem(provider.issuer, this.#profile)
    if (problem) throw new Error(`the provider ${problem}`)
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
