import { BlockList, isIPv4, isIPv6 } from 'node:net'
import type { Kysely } from 'kysely'
import { parseDuration } from '../../config.ts'
import { runWithTenant } from '../../context.ts'
import { InvalidatedCache } from '../../db/invalidated-cache.ts'
import type { Database } from '../../db/schema.ts'
import { tenantScope } from '../../db/tenant-scope.ts'
import { AppError } from '../../errors.ts'
import type { Principal } from '../../principal.ts'
import type { Revocation, RevocationListener } from '../../security/revocation.ts'
import type { ConfigKeyRule, ConfigWriteContext } from '../organizations/index.ts'
import type { SessionPolicy } from '../sessions/index.ts'
import { listAllSecurityEntries, listSecurityEntries, type SecurityEntry } from './repository.ts'

// An organization's security policies: organization configuration entries under `security.`,
// validated when written (SECURITY_KEY_RULES) and enforced on its users' and API keys' requests.
// What a request needs (the parsed policy of its organization, whether its user has a second
// factor) is held in memory: every organization's policy is read in one statement at start (and
// again when configuration notifications resume), and an organization's is read again on its next
// request after a change to its configuration (pushed to every instance); a user's second factor
// is kept until a revocation names the user or the revocation fallback TTL passes. While the
// notifications are down every request reads its organization's policy.

type PolicyWriteContext = ConfigWriteContext

const BOOLEAN = (value: string) => (value === 'true' || value === 'false' ? null : 'must be true or false')

const DURATION = (value: string) => {
  try {
    return parseDuration(value) > 0 ? null : 'must be a positive duration such as 30m, 8h or 7d'
  } catch {
    return 'must be a positive duration such as 30m, 8h or 7d'
  }
}

/** IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are their IPv4 address. */
function plainAddress(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)?.[1]
  return mapped ?? ip
}

/** The list of a `security.ip-allowlist` value, or the reason it is not one. */
export function parseAllowlist(value: string): BlockList | string {
  const list = new BlockList()
  const items = value.split(',').map((item) => item.trim())
  if (items.length === 0 || items.some((item) => item === ''))
    return 'must be a comma-separated list of CIDRs'
  for (const item of items) {
    const [address = '', prefixText, extra] = item.split('/')
    const family = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : null
    const max = family === 'ipv4' ? 32 : 128
    const prefix = prefixText === undefined ? max : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : -1
    if (!family || extra !== undefined || prefix < 0 || prefix > max)
      return `${item} is not an IPv4 or IPv6 CIDR`
    list.addSubnet(address, prefix, family)
  }
  return list
}

/** Whether `ip` is inside the list. */
export function allows(list: BlockList, ip: string): boolean {
  const address = plainAddress(ip)
  if (isIPv4(address)) return list.check(address, 'ipv4')
  return isIPv6(address) && list.check(address, 'ipv6')
}

/**
 * The `security.*` keys an organization may set, each with its value's check (400 VALIDATION_FAILED
 * with the reason) and, for a value that could lock the writer out, a check against the request
 * (409). A key not listed here is refused; a feature adds its own key as one more row.
 */
export const SECURITY_KEY_RULES: ReadonlyMap<string, ConfigKeyRule> = new Map<string, ConfigKeyRule>([
  ['security.mfa-required', { validate: BOOLEAN }],
  ['security.mfa-grace', { validate: DURATION }],
  ['security.session-max-age', { validate: DURATION }],
  [
    'security.ip-allowlist',
    {
      validate: (value: string) => {
        const list = parseAllowlist(value)
        return typeof list === 'string' ? list : null
      },
      // A list that leaves out the address the change comes from would lock its author out.
      check: (value: string, context: PolicyWriteContext) => {
        const list = parseAllowlist(value)
        if (typeof list === 'string' || context.confirmed) return
        if (context.clientIp && allows(list, context.clientIp)) return
        throw new AppError(
          'IP_NOT_ALLOWED',
          `The list leaves out your address (${context.clientIp ?? 'unknown'}); send it again with ?confirm=true to lock it out`,
          { status: 409 },
        )
      },
    },
  ],
  // Enforced by organization single sign-on; checked here so that it is a known key.
  ['security.sso-required', { validate: BOOLEAN }],
])

export const SECURITY_KEY_PREFIX = 'security.'

/** PostgreSQL's SQLSTATE for a table that does not exist. */
const UNDEFINED_TABLE = '42P01'

/** An organization's policies, parsed. */
interface Policy {
  /** When members without a second factor start being refused (epoch ms); null: never. */
  mfaFrom: number | null
  sessionMaxAge: number | null
  allowlist: BlockList | null
}

const NO_POLICY: Policy = { mfaFrom: null, sessionMaxAge: null, allowlist: null }

function policyOf(entries: readonly SecurityEntry[]): Policy {
  const value = (key: string) => entries.find((entry) => entry.key === key)
  const mfa = value('security.mfa-required')
  const grace = value('security.mfa-grace')
  const maxAge = value('security.session-max-age')
  const allowlist = value('security.ip-allowlist')
  const list = allowlist ? parseAllowlist(allowlist.value) : null
  const graceSeconds = grace && DURATION(grace.value) === null ? parseDuration(grace.value) : 0
  if (mfa?.value !== 'true' && !maxAge && !allowlist) return NO_POLICY
  return {
    // The grace runs from when the requirement was last set.
    mfaFrom: mfa?.value === 'true' ? mfa.updated_at.getTime() + graceSeconds * 1000 : null,
    sessionMaxAge: maxAge && DURATION(maxAge.value) === null ? parseDuration(maxAge.value) : null,
    allowlist: typeof list === 'string' ? null : list,
  }
}

export interface SecurityPoliciesDeps {
  db: Kysely<Database>
  /** How long whether a user has a second factor is trusted without a revocation naming them. */
  ttlMs: number
  now: () => number
  /** Whether the account has a TOTP or a passkey. */
  hasSecondFactor: (userId: string) => Promise<boolean>
  /** Whether configuration changes reach this instance (the policy cache is used only while they do). */
  listening: () => boolean
}

/** Where a request goes, as the policies see it. */
export interface PolicyRoute {
  /** A route that serves second-factor enrolment or signing out: open to members without one. */
  mfaEnrolment: boolean
}

export class SecurityPolicies implements RevocationListener {
  readonly #deps: SecurityPoliciesDeps
  /** The organizations that have a policy; complete while `#complete`, except the `#stale` ones. */
  #policies = new Map<string, Policy>()
  #complete = false
  readonly #stale = new Set<string>()
  /** Counts changes: a read that saw a change happen meanwhile is used once but not kept. */
  #changes = 0
  /** Counts the times notifications stopped or resumed: a full read from before one is dropped. */
  #resets = 0
  #loadingAll: Promise<void> | null = null
  readonly #factors: InvalidatedCache<{ has: true }>

  constructor(deps: SecurityPoliciesDeps) {
    this.#deps = deps
    this.#factors = new InvalidatedCache({ max: 50_000, ttl: deps.ttlMs })
  }

  /** Reads every organization's policy (at start, and when notifications resume). */
  loadAll(): Promise<void> {
    this.#loadingAll ??= (async () => {
      const resets = this.#resets
      try {
        const entries = await listAllSecurityEntries(this.#deps.db).catch((error: unknown) => {
          // A database not migrated yet (the CLI's `migrate` starts the services first): nothing to
          // hold; policies are read per organization until a later read of all succeeds.
          if ((error as { code?: unknown }).code === UNDEFINED_TABLE) return null
          throw error
        })
        if (entries === null) return
        const byOrganization = new Map<string, SecurityEntry[]>()
        for (const entry of entries) {
          const list = byOrganization.get(entry.organization_id) ?? []
          list.push(entry)
          byOrganization.set(entry.organization_id, list)
        }
        const policies = new Map<string, Policy>()
        for (const [organizationId, list] of byOrganization) {
          const policy = policyOf(list)
          if (policy !== NO_POLICY) policies.set(organizationId, policy)
        }
        // Organizations changed meanwhile are stale and are read again on their next request.
        if (this.#deps.listening() && resets === this.#resets) {
          this.#policies = policies
          this.#complete = true
        }
      } finally {
        this.#loadingAll = null
      }
      // Notifications stopped or resumed during the read: read again.
      if (resets !== this.#resets && this.#deps.listening()) await this.loadAll()
    })()
    return this.#loadingAll
  }

  async #policy(organizationId: string): Promise<Policy> {
    if (!this.#complete && this.#loadingAll === null && this.#deps.listening()) this.loadAll().catch(() => {})
    if (this.#complete && this.#deps.listening() && !this.#stale.has(organizationId))
      return this.#policies.get(organizationId) ?? NO_POLICY
    const changes = this.#changes
    // Read on behalf of the organization the request's principal belongs to.
    const tenant = runWithTenant(organizationId, tenantScope)
    const policy = policyOf(await listSecurityEntries(this.#deps.db, tenant))
    if (this.#complete && this.#deps.listening() && changes === this.#changes) {
      if (policy === NO_POLICY) this.#policies.delete(organizationId)
      else this.#policies.set(organizationId, policy)
      this.#stale.delete(organizationId)
    }
    return policy
  }

  /**
   * Refuses a request its organization's policies do not allow: from outside the IP allowlist (403
   * IP_NOT_ALLOWED, users and API keys), or by a member without a second factor once the
   * requirement's grace has passed (403 MFA_ENROLLMENT_REQUIRED), except on enrolment routes.
   */
  async enforce(principal: Principal, ip: string, route: PolicyRoute): Promise<void> {
    if (principal.organizationId === null) return
    const policy = await this.#policy(principal.organizationId)
    if (policy === NO_POLICY) return
    if (policy.allowlist && !allows(policy.allowlist, ip)) throw notAllowed()
    if (
      policy.mfaFrom !== null &&
      principal.type === 'USER' &&
      !route.mfaEnrolment &&
      this.#deps.now() >= policy.mfaFrom &&
      !(await this.#hasSecondFactor(principal.userId))
    ) {
      throw new AppError(
        'MFA_ENROLLMENT_REQUIRED',
        'Your organization requires a second factor: set up a one-time password or a passkey first',
      )
    }
  }

  /** Only a factor found is remembered: a member without one is refused, and asked again next time. */
  async #hasSecondFactor(userId: string): Promise<boolean> {
    if (this.#factors.get(userId)) return true
    const token = this.#factors.snapshot()
    const has = await this.#deps.hasSecondFactor(userId)
    if (has) this.#factors.setIfCurrent(token, userId, { has: true })
    return has
  }

  /**
   * The organization's policies on its sessions, read once: `security.session-max-age` in seconds
   * (or null), and the refusal of a sign-in or refresh from outside its IP allowlist (403
   * IP_NOT_ALLOWED: a session started or kept there could not be used anyway; an unknown address is
   * outside every list).
   */
  async sessionPolicy(organizationId: string): Promise<SessionPolicy> {
    const { sessionMaxAge, allowlist } = await this.#policy(organizationId)
    return {
      maxAge: sessionMaxAge,
      admitAddress: (ip) => {
        if (allowlist && (ip === null || !allows(allowlist, ip))) throw notAllowed()
      },
    }
  }

  /** Drops an organization's policy (null: every organization's) after its configuration changed. */
  configurationChanged(organizationId: string | null): void {
    this.#changes++
    if (organizationId !== null) {
      this.#stale.add(organizationId)
      return
    }
    // Notifications stopped or resumed: nothing held can be trusted.
    this.#resets++
    this.#complete = false
    this.#stale.clear()
    this.#policies = new Map()
    if (this.#deps.listening()) this.loadAll().catch(() => {})
  }

  revoked(revocation: Revocation): void {
    if (revocation.kind === 'user') this.#factors.delete(revocation.id)
  }

  clear(): void {
    this.#factors.clear()
  }
}

const notAllowed = () =>
  new AppError('IP_NOT_ALLOWED', 'Your organization does not allow requests from this address')
