import { randomBytes, timingSafeEqual } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import { type AuditTrail, actorOf } from '../../audit/index.ts'
import { organizationAdmin, type Permissions } from '../../authz/permissions.ts'
import type { TupleRecorder } from '../../authz/tuples.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { runWithTenant } from '../../context.ts'
import { inTransaction, mapUniqueViolation } from '../../db/database.ts'
import { InvalidatedCache } from '../../db/invalidated-cache.ts'
import { type Page, page, rowsToRead } from '../../db/paging.ts'
import type { Database } from '../../db/schema.ts'
import { type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError, validationFailed } from '../../errors.ts'
import type { ApiKeyPrincipal, Principal, ServiceAccountPrincipal, UserPrincipal } from '../../principal.ts'
import { isScope, SCOPES } from '../../scopes.ts'
import { publishRevocation, type Revocation, type RevocationListener } from '../../security/revocation.ts'
import type { AccessTokens, IssuedToken } from '../../security/tokens.ts'
import { sha256 } from '../../security/tokens.ts'
import { findOrganization } from '../organizations/index.ts'
import {
  type ApiKeyPageKey,
  type ApiKeyRow,
  type ApiKeyState,
  disableServiceAccount,
  findApiKey,
  findApiKeyByHash,
  findApiKeyOf,
  findServiceAccount,
  findServiceAccountByClientId,
  insertApiKey,
  insertServiceAccount,
  listApiKeys,
  recordApiKeyUse,
  revokeApiKey,
} from './repository.ts'

/** How often the last use of API keys is written (one batch, never a write per request). */
const LAST_USE_FLUSH_MS = 60_000

const KEY_BYTES = 32
const DISPLAY_CHARS = 8

export function parseScopes(input: string[]): string[] {
  const scopes = [...new Set(input.map((s) => s.trim()).filter(Boolean))]
  const unknown = scopes.filter((s) => !isScope(s))
  if (unknown.length > 0) {
    throw validationFailed(
      'scopes',
      `unknown scope ${unknown.join(', ')}`,
      `Unknown scope ${unknown.join(', ')}; known: ${SCOPES.join(', ')}`,
    )
  }
  return scopes.toSorted()
}

function sameHash(expectedHex: string, actualHex: string): boolean {
  const a = Buffer.from(expectedHex, 'hex')
  const b = Buffer.from(actualHex, 'hex')
  return a.length === b.length && timingSafeEqual(a, b)
}

interface Deps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  tokens: AccessTokens
  tuples: TupleRecorder
}

/** A service account whose credentials were just checked. */
export interface AuthenticatedClient {
  id: string
  clientId: string
  scopes: string[]
}

const cacheTtlMs = (config: Config) => config.auth.revocation.fallbackTtl * 1000

/**
 * Service accounts: client credentials for backends, no organization. Their active state is cached
 * by id; disabling one is pushed to every instance (src/security/revocation.ts).
 */
export class ServiceAccounts implements RevocationListener {
  readonly #deps: Deps
  readonly #active: InvalidatedCache<{ active: boolean; scopes: string[]; clientId: string }>
  readonly #dummyHash = sha256(randomBytes(32).toString('hex'))

  constructor(deps: Deps) {
    this.#deps = deps
    this.#active = new InvalidatedCache({ max: 10_000, ttl: cacheTtlMs(deps.config) })
  }

  revoked(revocation: Revocation): void {
    if (revocation.kind === 'service_account') this.#active.delete(revocation.id)
  }

  clear(): void {
    this.#active.clear()
  }

  async create(input: { clientId: string; description: string; scopes: string[] }) {
    const clientId = input.clientId.trim()
    if (!/^[A-Za-z0-9._:-]{3,100}$/.test(clientId)) {
      throw new AppError('VALIDATION_FAILED', 'clientId must be 3 to 100 letters, digits or . _ : -')
    }
    const clientSecret = randomBytes(KEY_BYTES).toString('base64url')
    const scopes = parseScopes(input.scopes)
    const row = await mapUniqueViolation(
      () =>
        inTransaction(this.#deps.db, async (trx) => {
          const inserted = await insertServiceAccount(trx, {
            clientId,
            secretHash: sha256(clientSecret),
            scopes,
            description: input.description,
            now: this.#deps.clock.now(),
          })
          await this.#deps.audit.record(trx, {
            type: 'service_account.created',
            organizationId: null,
            actor: actorOf(null),
            subject: { type: 'service_account', id: inserted.id },
            data: { clientId, scopes: scopes.join(' ') },
          })
          return inserted
        }),
      () => new AppError('ACCOUNT_EXISTS', 'A service account with this clientId already exists'),
      'service_accounts_client_id_key',
    )
    return { id: row.id, clientId: row.client_id, clientSecret }
  }

  async disable(clientId: string) {
    const row = await inTransaction(this.#deps.db, async (trx) => {
      const disabled = await disableServiceAccount(trx, clientId, this.#deps.clock.now())
      if (disabled) {
        await publishRevocation(trx, { kind: 'service_account', id: disabled.id })
        await this.#deps.audit.record(trx, {
          type: 'service_account.disabled',
          organizationId: null,
          actor: actorOf(null),
          subject: { type: 'service_account', id: disabled.id },
          data: { clientId: disabled.client_id },
        })
      }
      return disabled
    })
    if (!row) throw new AppError('NOT_FOUND', 'No such service account')
    this.#active.delete(row.id)
    return { id: row.id, clientId: row.client_id, disabledAt: row.disabled_at?.toISOString() ?? null }
  }

  /** Whether the account is still active, read afresh; a disabled one leaves the cache. */
  async stillValid(id: string): Promise<boolean> {
    const row = await findServiceAccount(this.#deps.db, id)
    if (row?.active) return true
    this.#active.delete(id)
    return false
  }

  /** Client-credentials grant; the secret is compared in constant time, unknown ids cost the same. */
  async issueToken(clientId: string, clientSecret: string): Promise<IssuedToken> {
    const client = await this.authenticateClient(clientId, clientSecret)
    if (client.outcome !== 'authenticated') {
      throw new AppError('INVALID_CREDENTIALS', 'The client credentials are not valid')
    }
    return this.issueTokenFor(client.account, client.account.scopes)
  }

  /**
   * Checks a client's credentials: the secret's hash is compared in constant time, and an unknown
   * client id is compared against a dummy hash, so both paths do the same work. `disabled` is told
   * only to a caller that presented the account's right secret.
   */
  async authenticateClient(
    clientId: string,
    clientSecret: string,
  ): Promise<
    | { outcome: 'authenticated'; account: AuthenticatedClient }
    | { outcome: 'invalid' }
    | { outcome: 'disabled' }
  > {
    const account = await findServiceAccountByClientId(this.#deps.db, clientId)
    const matches = sameHash(account?.secret_hash ?? this.#dummyHash, sha256(clientSecret))
    if (!account || !matches) return { outcome: 'invalid' }
    if (!account.active) return { outcome: 'disabled' }
    return {
      outcome: 'authenticated',
      account: { id: account.id, clientId: account.client_id, scopes: account.scopes },
    }
  }

  /** A service token for an authenticated account, carrying `scopes` (the account's, or a subset). */
  issueTokenFor(account: AuthenticatedClient, scopes: readonly string[]): IssuedToken {
    return this.#deps.tokens.issueServiceToken({
      sub: account.id,
      cid: account.clientId,
      scope: scopes.join(' '),
    })
  }

  /** The principal of a service bearer token, or null (bad token, disabled account). */
  async resolveBearer(token: string): Promise<ServiceAccountPrincipal | null> {
    const claims = this.#deps.tokens.verifyServiceToken(token)
    if (!claims) return null
    const state = await this.#active.load(claims.sub, async () => {
      const row = await findServiceAccount(this.#deps.db, claims.sub)
      return { active: row?.active ?? false, scopes: row?.scopes ?? [], clientId: row?.client_id ?? '' }
    })
    if (!state.active) return null
    // The token's scopes, narrowed to what the account holds now.
    const scopes = claims.scope.split(' ').filter((s) => state.scopes.includes(s))
    return {
      type: 'SERVICE_ACCOUNT',
      id: claims.sub,
      serviceAccountId: claims.sub,
      clientId: claims.cid,
      scopes: new Set(scopes),
      organizationId: null,
    }
  }
}

type CachedKey = Pick<ApiKeyRow, 'id' | 'organization_id' | 'scopes' | 'expires_at' | 'revoked_at'>

/** A key as the API and the CLI show it: never its hash, and the raw key only when created. */
export const toApiKey = (row: ApiKeyRow) => ({
  id: row.id,
  keyPrefix: row.key_prefix,
  scopes: row.scopes,
  description: row.description,
  createdAt: row.created_at.toISOString(),
  expiresAt: row.expires_at?.toISOString() ?? null,
  revokedAt: row.revoked_at?.toISOString() ?? null,
  lastUsedAt: row.last_used_at?.toISOString() ?? null,
})

export interface NewApiKey {
  scopes: string[]
  description: string
  expiresAt: Date | null
}

/**
 * API keys: organization-scoped credentials for integrations. Looked-up keys are cached by hash;
 * a revocation is pushed to every instance (src/security/revocation.ts). Managed by operators (the
 * CLI: `create`, `revoke`, `list`, actor system) and by an organization's admins over HTTP
 * (`…ByAdmin`, actor the admin). Only signed-in users are admins here: a key never manages keys,
 * whatever its scopes, so a leaked key cannot mint others that would outlive its revocation.
 */
export class ApiKeys implements RevocationListener {
  readonly #deps: Deps & { permissions: Permissions }
  readonly #byHash: InvalidatedCache<CachedKey | 'none'>
  readonly #lastUse = new Map<string, Date>()

  constructor(deps: Deps & { permissions: Permissions }) {
    this.#deps = deps
    this.#byHash = new InvalidatedCache({ max: 50_000, ttl: cacheTtlMs(deps.config) })
  }

  revoked(revocation: Revocation): void {
    if (revocation.kind === 'api_key') this.#byHash.delete(revocation.keyHash)
  }

  clear(): void {
    this.#byHash.clear()
  }

  /** Tuples that place an API key in the authorization model (see fga-model.fga). */
  static tuples(key: { id: string; organizationId: string; scopes: string[] }) {
    const subject = `api_key:${key.id}`
    const object = `organization:${key.organizationId}`
    const writes = key.scopes.some((s) => s.endsWith(':write'))
    return [
      { subject, relation: 'member', object },
      ...(writes ? [{ subject, relation: 'admin', object }] : []),
    ]
  }

  /** The caller's organization, when the caller is one of its admins (asked through the authorization port). */
  #authorize(principal: UserPrincipal): Promise<TenantScope> {
    return organizationAdmin(this.#deps.permissions, principal)
  }

  /** An operator's key for the organization (the CLI): recorded with the system as actor. */
  async create(input: NewApiKey & { organizationId: string }) {
    const { row, rawKey } = await this.#create(runWithTenant(input.organizationId, tenantScope), null, input)
    return { id: row.id, rawKey, keyPrefix: row.key_prefix }
  }

  /** A key of the admin's organization; any scope may be granted. The raw key is in this answer only. */
  async createByAdmin(principal: UserPrincipal, input: NewApiKey) {
    const tenant = await this.#authorize(principal)
    const { row, rawKey } = await this.#create(tenant, principal, input)
    return { ...toApiKey(row), rawKey }
  }

  async #create(tenant: TenantScope, actor: Principal | null, input: NewApiKey) {
    const { db, clock, config } = this.#deps
    const now = clock.now()
    if (input.expiresAt && input.expiresAt <= now) {
      throw validationFailed('body.expiresAt', 'must be in the future', 'expiresAt must be in the future')
    }
    const scopes = parseScopes(input.scopes)
    const secret = randomBytes(KEY_BYTES).toString('base64url')
    const rawKey = `${config.auth.apiKey.prefix}${secret}`
    const keyPrefix = `${config.auth.apiKey.prefix}${secret.slice(0, DISPLAY_CHARS)}`
    const row = await inTransaction(db, async (trx) => {
      if (!(await findOrganization(trx, tenant.organizationId)))
        throw new AppError('NOT_FOUND', 'No such organization')
      const inserted = await insertApiKey(trx, tenant, {
        keyPrefix,
        keyHash: sha256(rawKey),
        scopes,
        description: input.description,
        expiresAt: input.expiresAt,
        now,
      })
      const tuples = ApiKeys.tuples({ id: inserted.id, organizationId: tenant.organizationId, scopes })
      await this.#deps.tuples.record(
        trx,
        tuples.map((t) => ({ operation: 'write', ...t })),
        now,
      )
      await this.#deps.audit.record(trx, {
        type: 'api_key.created',
        organizationId: tenant.organizationId,
        actor: actorOf(actor),
        subject: { type: 'api_key', id: inserted.id },
        data: { keyPrefix, scopes: scopes.join(' ') },
      })
      return inserted
    })
    return { row, rawKey }
  }

  /** An operator's revocation of a key of any organization (the CLI). */
  async revoke(id: string) {
    const key = await findApiKey(this.#deps.db, id)
    if (!key) throw new AppError('NOT_FOUND', 'No such API key')
    const row = await this.#revoke(runWithTenant(key.organization_id, tenantScope), null, id)
    return { id: row.id, revokedAt: (row.revoked_at ?? this.#deps.clock.now()).toISOString() }
  }

  /** Revokes a key of the admin's organization; another organization's key is not found. */
  async revokeByAdmin(principal: UserPrincipal, id: string): Promise<void> {
    const tenant = await this.#authorize(principal)
    await this.#revoke(tenant, principal, id)
  }

  async #revoke(tenant: TenantScope, actor: Principal | null, id: string): Promise<ApiKeyRow> {
    const { db, clock } = this.#deps
    const now = clock.now()
    const row = await inTransaction(db, async (trx) => {
      const revoked = await revokeApiKey(trx, tenant, id, now)
      // Revoking again is idempotent: same answer, no second event, and the tuple deletes are not
      // queued twice (a concurrent revoke waits for the row and then finds it revoked).
      if (!revoked) return findApiKeyOf(trx, tenant, id)
      await publishRevocation(trx, { kind: 'api_key', keyHash: revoked.key_hash })
      await this.#deps.audit.record(trx, {
        type: 'api_key.revoked',
        organizationId: tenant.organizationId,
        actor: actorOf(actor),
        subject: { type: 'api_key', id },
        data: { keyPrefix: revoked.key_prefix },
      })
      const tuples = ApiKeys.tuples({ id, organizationId: tenant.organizationId, scopes: revoked.scopes })
      await this.#deps.tuples.record(
        trx,
        tuples.map((t) => ({ operation: 'delete', ...t })),
        now,
      )
      return revoked
    })
    if (!row) throw new AppError('NOT_FOUND', 'No such API key')
    this.#byHash.delete(row.key_hash)
    return row
  }

  /** Every key of the organization, newest first (the CLI). */
  async list(organizationId: string) {
    const tenant = runWithTenant(organizationId, tenantScope)
    const rows = await listApiKeys(this.#deps.db, tenant, { now: this.#deps.clock.now(), limit: null })
    return rows.map(toApiKey)
  }

  /** A key of the admin's organization; another organization's key is not found. */
  async getByAdmin(principal: UserPrincipal, id: string) {
    const tenant = await this.#authorize(principal)
    const row = await findApiKeyOf(this.#deps.db, tenant, id)
    if (!row) throw new AppError('NOT_FOUND', 'No such API key')
    return toApiKey(row)
  }

  /** A page of the admin's organization's keys, newest first, in one state if asked. */
  async pageByAdmin(
    principal: UserPrincipal,
    options: { limit: number; state?: ApiKeyState | undefined; after?: ApiKeyPageKey | undefined },
  ): Promise<Page<ReturnType<typeof toApiKey>, ApiKeyPageKey>> {
    const tenant = await this.#authorize(principal)
    const rows = await listApiKeys(this.#deps.db, tenant, {
      now: this.#deps.clock.now(),
      state: options.state,
      after: options.after,
      limit: rowsToRead(options.limit),
    })
    const { items, next } = page(rows, options.limit, (last) => ({ createdAt: last.created_at, id: last.id }))
    return { items: items.map(toApiKey), next }
  }

  /**
   * The principal of a presented key, or null without saying why: no prefix,
   * unknown, revoked and expired all look the same to the caller.
   */
  async resolve(rawKey: string): Promise<ApiKeyPrincipal | null> {
    const { db, clock, config } = this.#deps
    if (!rawKey.startsWith(config.auth.apiKey.prefix) || rawKey.length > 256) return null
    const hash = sha256(rawKey)
    const key = await this.#byHash.load(hash, async () => {
      const row = await findApiKeyByHash(db, hash)
      return row
        ? {
            id: row.id,
            organization_id: row.organization_id,
            scopes: row.scopes,
            expires_at: row.expires_at,
            revoked_at: row.revoked_at,
          }
        : 'none'
    })
    if (key === 'none' || key.revoked_at) return null
    const now = clock.now()
    if (key.expires_at && key.expires_at <= now) return null
    this.#lastUse.set(key.id, now)
    return {
      type: 'API_KEY',
      id: key.id,
      apiKeyId: key.id,
      organizationId: key.organization_id,
      scopes: new Set(key.scopes),
    }
  }

  /** Whether the key is still usable (not revoked, not expired), read afresh; a dead one leaves the cache. */
  async stillValid(id: string): Promise<boolean> {
    const row = await findApiKey(this.#deps.db, id)
    const now = this.#deps.clock.now()
    if (row && !row.revoked_at && !(row.expires_at && row.expires_at <= now)) return true
    this.#byHash.deleteWhere((key) => key !== 'none' && key.id === id)
    return false
  }

  /** Writes the last-use times gathered since the previous flush. */
  async flushLastUse(): Promise<void> {
    if (this.#lastUse.size === 0) return
    const batch = new Map(this.#lastUse)
    this.#lastUse.clear()
    await recordApiKeyUse(this.#deps.db, batch)
  }
}

/**
 * Writes the last use `apiKeys` gathers in one batch a minute while started, and what is left on
 * stop; a failed write is logged, never thrown.
 */
export function lastUseFlush(
  apiKeys: ApiKeys,
  log: Pick<FastifyBaseLogger, 'warn'>,
): { start(): void; stop(): Promise<void> } {
  const flush = () =>
    apiKeys.flushLastUse().catch((error: unknown) => log.warn({ err: error }, 'recording API key use failed'))
  let timer: NodeJS.Timeout | undefined
  return {
    start() {
      timer = setInterval(flush, LAST_USE_FLUSH_MS)
      timer.unref()
    },
    async stop() {
      clearInterval(timer)
      await flush()
    },
  }
}
