import { randomBytes } from 'node:crypto'
import { Resolver } from 'node:dns/promises'
import { createRequire } from 'node:module'
import { parse } from 'tldts'
import { validationFailed } from '../../errors.ts'

// Email domains an organization may claim, and the DNS proof that it controls one.

/** The DNS name that holds a domain's challenge. */
export const CHALLENGE_LABEL = '_platform-verification'

/** How long one TXT lookup may take before the domain simply stays pending. */
export const DNS_TIMEOUT_MS = 3_000

// Free email providers' domains (the `email-providers` package's list, updated monthly): their
// users are not one organization's people.
const FREEMAIL: ReadonlySet<string> = new Set(createRequire(import.meta.url)('email-providers/all.json'))

/** Lower-case, without a trailing dot; null for what is no host name. */
export function normalizeDomain(value: string): string | null {
  const domain = value.trim().toLowerCase().replace(/\.$/, '')
  if (domain.length === 0 || domain.length > 253) return null
  if (!/^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}$/.test(domain)) return null
  return domain
}

/** The domain of an address (after its last `@`), normalized; null when there is none. */
export function domainOfEmail(email: string): string | null {
  const at = email.lastIndexOf('@')
  return at < 1 ? null : normalizeDomain(email.slice(at + 1))
}

/**
 * The normalized domain an organization may claim: a host name under a public suffix (the Public
 * Suffix List through `tldts`, private suffixes such as `github.io` included), not a free email
 * provider's. 400 VALIDATION_FAILED otherwise.
 */
export function claimableDomain(value: string): string {
  const domain = normalizeDomain(value)
  if (!domain) throw validationFailed('body.domain', 'must be a domain name')
  const parsed = parse(domain, { allowPrivateDomains: true })
  if (parsed.isIp || !parsed.domain || !parsed.publicSuffix || parsed.publicSuffix === domain) {
    throw validationFailed('body.domain', 'is a public suffix, which no organization can claim')
  }
  const registrable = parse(domain).domain ?? domain
  if (FREEMAIL.has(domain) || FREEMAIL.has(registrable) || FREEMAIL.has(parsed.domain)) {
    throw validationFailed(
      'body.domain',
      "is a free email provider's domain, which no organization can claim",
    )
  }
  return domain
}

/** A new random challenge value. */
export function newChallenge(): string {
  return `platform-verification=${randomBytes(24).toString('base64url')}`
}

/** The TXT records at a name, each joined from its strings; empty when there are none. */
export type TxtLookup = (name: string) => Promise<string[]>

/**
 * TXT lookups through `servers` (host:port entries; the system's resolvers when empty), each
 * bounded by `timeoutMs`. A name without records, and a lookup that fails or times out, read as
 * no records: the domain stays pending.
 */
export function txtLookup(servers: readonly string[], timeoutMs = DNS_TIMEOUT_MS): TxtLookup {
  // An entry node:dns cannot use stops the start, not every later verification.
  try {
    if (servers.length > 0) new Resolver().setServers([...servers])
  } catch (error) {
    throw new Error(`platform.dns.servers: ${(error as Error).message}`)
  }
  return async (name) => {
    const resolver = new Resolver({ timeout: timeoutMs, tries: 1 })
    if (servers.length > 0) resolver.setServers([...servers])
    const timer = new Promise<never>((_, reject) => {
      setTimeout(() => reject(new Error('DNS lookup timed out')), timeoutMs + 500).unref()
    })
    try {
      const records = await Promise.race([resolver.resolveTxt(name), timer])
      return records.map((parts) => parts.join(''))
    } catch {
      return []
    } finally {
      resolver.cancel()
    }
  }
}
