import type { Kysely } from 'kysely'
import { type AuditTrail, type AuditValue, actorOf } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction, isUniqueViolation, mapUniqueViolation } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError, validationFailed } from '../../errors.ts'
import type { UserPrincipal } from '../../principal.ts'
import type { SecretBox } from '../../security/secret-box.ts'
import { organizationAdmin } from '../accounts/index.ts'
import { CHALLENGE_LABEL, claimableDomain, newChallenge, normalizeDomain, type TxtLookup } from './domains.ts'
import {
  type ConnectionRow,
  type DomainRow,
  deleteConnection,
  deleteDomain,
  findConnection,
  findDomain,
  insertConnection,
  insertDomain,
  listConnections,
  listDomains,
  markDomainChecked,
  updateConnection,
  verifiedDomainOwner,
} from './repository.ts'

export interface SsoAdministrationDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  /** Seals connections' client secrets. */
  box: SecretBox
  /** Reads a domain's TXT records. */
  lookupTxt: TxtLookup
}

export interface ConnectionInput {
  name?: string | undefined
  issuer: string
  clientId: string
  clientSecret: string
  enabled?: boolean | undefined
}

export type ConnectionChanges = Partial<ConnectionInput>

export const toConnection = (row: ConnectionRow) => ({
  id: row.id,
  name: row.name,
  issuer: row.issuer,
  clientId: row.client_id,
  enabled: row.enabled,
  createdAt: (row.created_at as Date).toISOString(),
  updatedAt: (row.updated_at as Date).toISOString(),
})

export const toDomain = (row: DomainRow) => ({
  domain: row.domain,
  status: row.verified_at ? ('verified' as const) : ('pending' as const),
  txtRecord: { name: `${CHALLENGE_LABEL}.${row.domain}`, value: row.challenge },
  verifiedAt: row.verified_at ? (row.verified_at as Date).toISOString() : null,
  checkedAt: row.checked_at ? (row.checked_at as Date).toISOString() : null,
  createdAt: (row.created_at as Date).toISOString(),
})

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]'])

/**
 * 400 unless the issuer is an https URL (or, under the development and test profiles, an http
 * URL on a loopback address); returned without a trailing slash, as discovery compares it.
 */
export function checkIssuer(value: string, profile: Config['profile']): string {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw validationFailed('body.issuer', 'must be a URL')
  }
  const loopbackHttp =
    url.protocol === 'http:' &&
    (profile === 'development' || profile === 'test') &&
    (LOOPBACK_HOSTS.has(url.hostname) || /^127\.\d+\.\d+\.\d+$/.test(url.hostname))
  if (url.protocol !== 'https:' && !loopbackHttp) {
    throw validationFailed(
      'body.issuer',
      'must be an https URL (http only on a loopback address under the development profile)',
    )
  }
  if (url.search || url.hash || url.username || url.password) {
    throw validationFailed('body.issuer', 'must have no query, fragment or credentials')
  }
  return value.replace(/\/+$/, '')
}

const oneEnabled = <T>(work: () => Promise<T>) =>
  mapUniqueViolation(
    work,
    () => new AppError('SSO_CONNECTION_ENABLED', 'The organization has an enabled connection already'),
    'sso_connections_one_enabled_key',
  )

const verifiedElsewhere = () =>
  new AppError('SSO_DOMAIN_VERIFIED_ELSEWHERE', 'Another organization has verified this domain')

/**
 * An organization's single sign-on settings, for its admins: OpenID Connect connections (the
 * client secret sealed at rest and never answered; at most one enabled) and the email domains it
 * claims, each proved by a DNS TXT record. Who may administer is decided by the caller's account
 * row, read in the operation's transaction (active, role `admin`, of the tenant's organization), as
 * user administration decides it. Every change is one transaction with its audit event.
 */
export class SsoAdministration {
  readonly #deps: SsoAdministrationDeps

  constructor(deps: SsoAdministrationDeps) {
    this.#deps = deps
  }

  /** 403 ACCESS_DENIED unless the caller's account is an active admin of the tenant's organization. */
  async #authorize(trx: Tx, caller: UserPrincipal): Promise<TenantScope> {
    const tenant = tenantScope()
    await organizationAdmin(trx, caller.userId, tenant.organizationId)
    return tenant
  }

  #record(
    trx: Tx,
    caller: UserPrincipal,
    tenant: TenantScope,
    type: string,
    subject: { type: string; id: string },
    data: Record<string, AuditValue>,
  ) {
    return this.#deps.audit.record(trx, {
      type,
      organizationId: tenant.organizationId,
      actor: actorOf(caller),
      subject,
      data,
    })
  }

  async listConnections(caller: UserPrincipal) {
    return inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      return { items: (await listConnections(trx, tenant)).map(toConnection) }
    })
  }

  async getConnection(caller: UserPrincipal, id: string) {
    return inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const row = await findConnection(trx, tenant, id)
      if (!row) throw new AppError('NOT_FOUND', 'No such connection')
      return toConnection(row)
    })
  }

  async createConnection(caller: UserPrincipal, input: ConnectionInput) {
    const { db, clock, config, box } = this.#deps
    const issuer = checkIssuer(input.issuer, config.profile)
    return oneEnabled(() =>
      inTransaction(db, async (trx) => {
        const tenant = await this.#authorize(trx, caller)
        const row = await insertConnection(trx, tenant, {
          name: input.name ?? '',
          issuer,
          clientId: input.clientId,
          clientSecret: box.seal(input.clientSecret),
          enabled: input.enabled ?? true,
          now: clock.now(),
        })
        await this.#record(
          trx,
          caller,
          tenant,
          'sso_connection.created',
          { type: 'sso_connection', id: row.id },
          {
            issuer,
            enabled: row.enabled,
          },
        )
        return toConnection(row)
      }),
    )
  }

  async updateConnection(caller: UserPrincipal, id: string, changes: ConnectionChanges) {
    const { db, clock, config, box } = this.#deps
    const issuer = changes.issuer === undefined ? undefined : checkIssuer(changes.issuer, config.profile)
    return oneEnabled(() =>
      inTransaction(db, async (trx) => {
        const tenant = await this.#authorize(trx, caller)
        const row = await updateConnection(trx, tenant, id, {
          ...(changes.name === undefined ? {} : { name: changes.name }),
          ...(issuer === undefined ? {} : { issuer }),
          ...(changes.clientId === undefined ? {} : { client_id: changes.clientId }),
          ...(changes.clientSecret === undefined ? {} : { client_secret: box.seal(changes.clientSecret) }),
          ...(changes.enabled === undefined ? {} : { enabled: changes.enabled }),
          updated_at: clock.now(),
        })
        if (!row) throw new AppError('NOT_FOUND', 'No such connection')
        // The names of what changed, never the secret.
        const changed = Object.keys(changes).filter(
          (key) => changes[key as keyof ConnectionChanges] !== undefined,
        )
        await this.#record(
          trx,
          caller,
          tenant,
          'sso_connection.updated',
          { type: 'sso_connection', id },
          {
            changed: changed.join(','),
            enabled: row.enabled,
          },
        )
        return toConnection(row)
      }),
    )
  }

  async deleteConnection(caller: UserPrincipal, id: string): Promise<void> {
    await inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      if (!(await deleteConnection(trx, tenant, id))) throw new AppError('NOT_FOUND', 'No such connection')
      await this.#record(trx, caller, tenant, 'sso_connection.deleted', { type: 'sso_connection', id }, {})
    })
  }

  async listDomains(caller: UserPrincipal) {
    return inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      return { items: (await listDomains(trx, tenant)).map(toDomain) }
    })
  }

  async getDomain(caller: UserPrincipal, value: string) {
    const domain = normalizeDomain(value)
    return inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const row = domain ? await findDomain(trx, tenant, domain) : undefined
      if (!row) throw new AppError('NOT_FOUND', 'No such domain')
      return toDomain(row)
    })
  }

  /**
   * Claims a domain: pending, with a new challenge; the same domain claimed again answers the
   * existing claim. 400 for a public suffix or a free email provider's domain, 409 when another
   * organization has verified it.
   */
  async addDomain(caller: UserPrincipal, value: string) {
    const domain = claimableDomain(value)
    return inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const owner = await verifiedDomainOwner(trx, domain)
      if (owner !== undefined && owner !== tenant.organizationId) throw verifiedElsewhere()
      const inserted = await insertDomain(trx, tenant, {
        domain,
        challenge: newChallenge(),
        now: this.#deps.clock.now(),
      })
      if (!inserted) {
        const existing = await findDomain(trx, tenant, domain)
        if (!existing) throw new AppError('SERVICE_UNAVAILABLE', 'The domain could not be claimed; retry')
        return { created: false, domain: toDomain(existing) }
      }
      await this.#record(
        trx,
        caller,
        tenant,
        'sso_domain.added',
        { type: 'sso_domain', id: domain },
        { domain },
      )
      return { created: true, domain: toDomain(inserted) }
    })
  }

  /**
   * Looks the challenge up (outside any transaction) and marks the domain verified when a TXT
   * record at `_platform-verification.<domain>` holds it; otherwise it stays pending. 409 when
   * another organization has verified the domain meanwhile.
   */
  async verifyDomain(caller: UserPrincipal, value: string) {
    const { db, clock, lookupTxt } = this.#deps
    const domain = normalizeDomain(value)
    if (!domain) throw new AppError('NOT_FOUND', 'No such domain')
    const claim = await inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      return findDomain(trx, tenant, domain)
    })
    if (!claim) throw new AppError('NOT_FOUND', 'No such domain')
    if (claim.verified_at) return toDomain(claim)
    const records = await lookupTxt(`${CHALLENGE_LABEL}.${domain}`)
    const seen = records.some((record) => record.trim() === claim.challenge)
    try {
      return await inTransaction(db, async (trx) => {
        const tenant = await this.#authorize(trx, caller)
        const owner = await verifiedDomainOwner(trx, domain)
        if (owner !== undefined && owner !== tenant.organizationId) throw verifiedElsewhere()
        const row = await markDomainChecked(trx, tenant, domain, { now: clock.now(), verified: seen })
        if (!row) throw new AppError('NOT_FOUND', 'No such domain')
        if (seen) {
          await this.#record(
            trx,
            caller,
            tenant,
            'sso_domain.verified',
            { type: 'sso_domain', id: domain },
            {
              domain,
            },
          )
        }
        return toDomain(row)
      })
    } catch (error) {
      if (isUniqueViolation(error, 'sso_domains_verified_key')) throw verifiedElsewhere()
      throw error
    }
  }

  async deleteDomain(caller: UserPrincipal, value: string): Promise<void> {
    const domain = normalizeDomain(value)
    if (!domain) throw new AppError('NOT_FOUND', 'No such domain')
    await inTransaction(this.#deps.db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      if (!(await deleteDomain(trx, tenant, domain))) throw new AppError('NOT_FOUND', 'No such domain')
      await this.#record(
        trx,
        caller,
        tenant,
        'sso_domain.removed',
        { type: 'sso_domain', id: domain },
        { domain },
      )
    })
  }
}
