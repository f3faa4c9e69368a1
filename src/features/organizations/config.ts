import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import { type AuditTrail, actorOf } from '../../audit/index.ts'
import type { Permissions } from '../../authz/permissions.ts'
import type { Clock } from '../../clock.ts'
import { runWithTenant } from '../../context.ts'
import { type DatabaseHandle, inTransaction } from '../../db/database.ts'
import { InvalidatedCache } from '../../db/invalidated-cache.ts'
import { LISTEN_LOST, LISTEN_RESET, notify } from '../../db/notifications.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { currentTenantScope, type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError, validationFailed } from '../../errors.ts'
import type { Principal } from '../../principal.ts'
import {
  deleteConfigEntry,
  listConfigEntries,
  type OrganizationConfigRow,
  upsertConfigEntry,
} from './config-repository.ts'

// Per-organization configuration that changes at runtime.
//
// Each public operation is one transaction (the large-text value column needs one on a
// production-grade database). Domain code reads values through `getValue`, served from an
// in-process cache of each organization's entries. Every write sends a
// NOTIFY on ORGANIZATION_CONFIG_CHANNEL with the organization id, inside its transaction, so every
// instance on the database (this one included) drops that organization's entries when the write
// commits (a change on one instance is seen by the others at once).
//
// The cache is only trusted while the notifications flow: it stays empty until the listener is up,
// and is emptied and bypassed from the moment the LISTEN connection is lost until it is back. A
// read that was in flight when any invalidation arrived is returned but not cached, since it may
// have read the value from before the change.

export const ORGANIZATION_CONFIG_CHANNEL = 'organization_config'
export const CONFIG_KEY_PATTERN = '^[a-z0-9][a-z0-9._-]{0,127}$'
export const CONFIG_VALUE_MAX_BYTES = 64 * 1024

const KEY = new RegExp(CONFIG_KEY_PATTERN)

export interface OrganizationConfigEntry {
  key: string
  value: string
  updatedAt: Date
}

/**
 * What a key's value must be: `validate` gives the reason a value is refused (400
 * VALIDATION_FAILED) or null; `check` judges a valid value against the request writing it (the
 * writer's address) and may throw (409).
 */
export interface ConfigKeyRule<C = ConfigWriteContext> {
  validate(value: string): string | null
  check?(value: string, context: C): void
}

/** What a write knows of its request. */
export interface ConfigWriteContext {
  /** The client address as `platform.server.trust-proxy` decides it. */
  clientIp: string | null
  /** The caller confirmed a change its rule would otherwise refuse (`?confirm=true`). */
  confirmed: boolean
}

/** Typed keys: the rule of each, and the prefixes under which only listed keys are accepted. */
export interface ConfigKeyRules {
  rules: ReadonlyMap<string, ConfigKeyRule>
  closedPrefixes: readonly string[]
}

/** Called after this instance applied a change: an organization id, or null for "anything". */
export type ConfigChangeListener = (organizationId: string | null) => void

export interface OrganizationConfigOptions {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  /** Who may read (`member`) and write (`admin`) an organization's entries. */
  permissions: Permissions
  /** Organizations whose entries are kept (least recently used are evicted). */
  maxOrganizations?: number
  /** Keys whose values are checked when written; none by default. */
  keyRules?: ConfigKeyRules
}

/** 400 VALIDATION_FAILED unless `key` is a valid configuration key. */
export function checkConfigKey(key: string): void {
  if (!KEY.test(key)) throw validationFailed('params.key', `must match ${CONFIG_KEY_PATTERN}`)
}

function checkValue(value: string): void {
  if (Buffer.byteLength(value, 'utf8') > CONFIG_VALUE_MAX_BYTES) {
    throw validationFailed('body.value', `must be at most ${CONFIG_VALUE_MAX_BYTES} bytes (UTF-8)`)
  }
  // PostgreSQL text cannot hold NUL.
  if (value.includes('\u0000')) throw validationFailed('body.value', 'must not contain NUL characters')
}

const toEntry = (row: OrganizationConfigRow): OrganizationConfigEntry => ({
  key: row.key,
  value: row.value,
  updatedAt: row.updated_at,
})

const isForeignKeyViolation = (error: unknown) => (error as { code?: unknown }).code === '23503'

export class OrganizationConfig {
  readonly #audit: AuditTrail
  readonly #db: Kysely<Database>
  readonly #clock: Clock
  readonly #permissions: Permissions
  readonly #keyRules: ConfigKeyRules
  readonly #cache: InvalidatedCache<ReadonlyMap<string, string>>
  readonly #listeners = new Set<ConfigChangeListener>()
  /** Whether notifications reach this instance; the cache is used only while they do. */
  #listening = false

  constructor(options: OrganizationConfigOptions) {
    this.#audit = options.audit
    this.#db = options.db
    this.#clock = options.clock
    this.#permissions = options.permissions
    this.#keyRules = options.keyRules ?? { rules: new Map(), closedPrefixes: [] }
    this.#cache = new InvalidatedCache({
      max: options.maxOrganizations ?? 10_000,
      // Characters, roughly: 64 MiB of values at most, whatever the number of organizations.
      maxSize: 32 * 1024 * 1024,
      sizeCalculation: (entries) => {
        let size = 1
        for (const [key, value] of entries) size += key.length + value.length
        return size
      },
    })
  }

  /**
   * The organization's entries, ordered by key, for a member of it: 403 ACCESS_DENIED for anyone
   * else, another organization's id included.
   */
  async list(principal: Principal, organizationId: string): Promise<OrganizationConfigEntry[]> {
    await this.#permissions.require(principal, 'member', `organization:${organizationId}`)
    return (await this.#load(tenantOf(organizationId))).map(toEntry)
  }

  /**
   * Stores the value under the key (creating or replacing it) for an admin of the organization
   * (403 ACCESS_DENIED otherwise); 400 on an invalid key or value, a typed key's rule included;
   * a typed key's rule may refuse a valid value for the request writing it (409).
   */
  async put(
    principal: Principal,
    organizationId: string,
    key: string,
    value: string,
    context: ConfigWriteContext = { clientIp: null, confirmed: false },
  ): Promise<OrganizationConfigEntry> {
    await this.#permissions.require(principal, 'admin', `organization:${organizationId}`)
    const tenant = tenantOf(organizationId)
    checkConfigKey(key)
    checkValue(value)
    this.#checkTyped(key, value, context)
    try {
      const row = await inTransaction(this.#db, async (trx) => {
        const stored = await upsertConfigEntry(trx, tenant, { key, value, now: this.#clock.now() })
        await notify(trx, ORGANIZATION_CONFIG_CHANNEL, organizationId)
        await this.#changed(trx, principal, organizationId, key, 'set')
        return stored
      })
      return toEntry(row)
    } catch (error) {
      if (isForeignKeyViolation(error)) throw new AppError('NOT_FOUND', 'No such organization')
      throw error
    }
  }

  /** Removes the key for an admin of the organization; false when it was not set (nothing is sent then). */
  async delete(principal: Principal, organizationId: string, key: string): Promise<boolean> {
    await this.#permissions.require(principal, 'admin', `organization:${organizationId}`)
    const tenant = tenantOf(organizationId)
    checkConfigKey(key)
    const deleted = await inTransaction(this.#db, async (trx) => {
      const found = await deleteConfigEntry(trx, tenant, key)
      if (found) {
        await notify(trx, ORGANIZATION_CONFIG_CHANNEL, organizationId)
        await this.#changed(trx, principal, organizationId, key, 'removed')
      }
      return found
    })
    return deleted
  }

  #checkTyped(key: string, value: string, context: ConfigWriteContext): void {
    const rule = this.#keyRules.rules.get(key)
    if (!rule) {
      if (this.#keyRules.closedPrefixes.some((prefix) => key.startsWith(prefix)))
        throw validationFailed('params.key', 'is not a known key under its prefix')
      return
    }
    const reason = rule.validate(value)
    if (reason !== null) throw validationFailed('body.value', reason)
    rule.check?.(value, context)
  }

  /** The audit event of a change: the key, never the value (it may be a secret of the organization). */
  #changed(trx: Tx, principal: Principal, organizationId: string, key: string, change: 'set' | 'removed') {
    return this.#audit.record(trx, {
      type: 'organization_config.changed',
      organizationId,
      actor: actorOf(principal),
      subject: { type: 'organization', id: organizationId },
      data: { key, change },
    })
  }

  /**
   * The value for domain code (cached); undefined when the organization has not set the key. Read on
   * behalf of the organization the caller names (the mail worker sends an organization's message).
   */
  async getValue(organizationId: string, key: string): Promise<string | undefined> {
    const cached = this.#listening ? this.#cache.get(organizationId) : undefined
    if (cached) return cached.get(key)
    const tenant = runWithTenant(organizationId, tenantScope)
    return (await this.#load(tenant)).find((row) => row.key === key)?.value
  }

  /**
   * Applies a message of the LISTEN connection: an organization id drops that organization's
   * entries; LISTEN_LOST stops caching and LISTEN_RESET starts it again, both dropping everything.
   */
  applyNotification(payload: string): void {
    if (payload === LISTEN_LOST) this.setListening(false)
    else if (payload === LISTEN_RESET) this.setListening(true)
    else this.#invalidate(payload)
  }

  /** Whether change notifications reach this instance, so that its cache is in use. */
  get listening(): boolean {
    return this.#listening
  }

  /**
   * Caches while configuration changes on any instance reach this one through LISTEN/NOTIFY, from
   * now until the returned function is called (caching stops before the listening does).
   */
  async followChanges(
    listen: DatabaseHandle['listen'],
    log: Pick<FastifyBaseLogger, 'info' | 'warn'>,
  ): Promise<() => Promise<void>> {
    const unlisten = await listen(ORGANIZATION_CONFIG_CHANNEL, (payload) => {
      if (payload === LISTEN_LOST) log.warn('configuration change notifications lost; cache bypassed')
      if (payload === LISTEN_RESET) log.info('configuration change notifications resumed')
      this.applyNotification(payload)
    })
    this.setListening(true)
    return async () => {
      this.setListening(false)
      await unlisten()
    }
  }

  /** Switches the cache on or off as notifications start or stop. */
  setListening(listening: boolean): void {
    this.#listening = listening
    this.#cache.clear()
    this.#emit(null)
  }

  /** Runs `listener` after each change this instance has applied; returns the unsubscribe function. */
  onChange(listener: ConfigChangeListener): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  #invalidate(organizationId: string): void {
    this.#cache.delete(organizationId)
    this.#emit(organizationId)
  }

  #emit(organizationId: string | null): void {
    for (const listener of this.#listeners) listener(organizationId)
  }

  /** Reads the entries in one transaction and caches them unless an invalidation came meanwhile. */
  async #load(tenant: TenantScope): Promise<OrganizationConfigRow[]> {
    const token = this.#cache.snapshot()
    const rows = await inTransaction(this.#db, (trx) => listConfigEntries(trx, tenant))
    if (this.#listening) {
      this.#cache.setIfCurrent(token, tenant.organizationId, new Map(rows.map((row) => [row.key, row.value])))
    }
    return rows
  }
}

/**
 * The tenant's scope when the organization of the path is the tenant's own: 403 ACCESS_DENIED for
 * any other, even one an authorization tuple relates the caller to.
 */
function tenantOf(organizationId: string): TenantScope {
  const tenant = currentTenantScope()
  if (tenant?.organizationId !== organizationId) {
    throw new AppError('ACCESS_DENIED', 'You do not have access to this resource')
  }
  return tenant
}
