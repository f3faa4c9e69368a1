import { type Selectable, sql } from 'kysely'
import { type CursorKey, cursorCodec } from '../../db/paging.ts'
import type { ApiKeyTable, Executor, ServiceAccountTable, Tx } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'

export type ServiceAccountRow = Selectable<ServiceAccountTable>
export type ApiKeyRow = Selectable<ApiKeyTable>

export function insertServiceAccount(
  db: Executor,
  values: { clientId: string; secretHash: string; scopes: string[]; description: string; now: Date },
): Promise<ServiceAccountRow> {
  return db
    .insertInto('service_accounts')
    .values({
      client_id: values.clientId,
      secret_hash: values.secretHash,
      scopes: values.scopes,
      description: values.description,
      created_at: values.now,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

export function findServiceAccountByClientId(
  db: Executor,
  clientId: string,
): Promise<ServiceAccountRow | undefined> {
  return db.selectFrom('service_accounts').selectAll().where('client_id', '=', clientId).executeTakeFirst()
}

export function findServiceAccount(db: Executor, id: string): Promise<ServiceAccountRow | undefined> {
  return db.selectFrom('service_accounts').selectAll().where('id', '=', id).executeTakeFirst()
}

export function disableServiceAccount(
  db: Executor,
  clientId: string,
  now: Date,
): Promise<ServiceAccountRow | undefined> {
  return db
    .updateTable('service_accounts')
    .set({ active: false, disabled_at: sql`coalesce(disabled_at, ${now})` })
    .where('client_id', '=', clientId)
    .returningAll()
    .executeTakeFirst()
}

export function insertApiKey(
  trx: Tx,
  tenant: TenantScope,
  values: {
    keyPrefix: string
    keyHash: string
    scopes: string[]
    description: string
    expiresAt: Date | null
    now: Date
  },
): Promise<ApiKeyRow> {
  return trx
    .insertInto('api_keys')
    .values({
      organization_id: tenant.organizationId,
      key_prefix: values.keyPrefix,
      key_hash: values.keyHash,
      scopes: values.scopes,
      description: values.description,
      expires_at: values.expiresAt,
      created_at: values.now,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

export function findApiKeyByHash(db: Executor, keyHash: string): Promise<ApiKeyRow | undefined> {
  return db.selectFrom('api_keys').selectAll().where('key_hash', '=', keyHash).executeTakeFirst()
}

/** Revokes an active key of the organization; undefined when it is not one, or was already revoked. */
export function revokeApiKey(
  trx: Tx,
  tenant: TenantScope,
  id: string,
  now: Date,
): Promise<ApiKeyRow | undefined> {
  return trx
    .updateTable('api_keys')
    .set({ revoked_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returningAll()
    .executeTakeFirst()
}

/** A key of the organization. */
export function findApiKeyOf(db: Executor, tenant: TenantScope, id: string): Promise<ApiKeyRow | undefined> {
  return db
    .selectFrom('api_keys')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .executeTakeFirst()
}

/** A key of any organization: its principal's re-check, and an operator's revoke by id. */
export function findApiKey(db: Executor, id: string): Promise<ApiKeyRow | undefined> {
  return db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst()
}

export type ApiKeyState = 'active' | 'revoked' | 'expired'

/** The list's cursors: a position in its order (created_at desc, id desc), the last row of a page. */
export const ApiKeyCursor = cursorCodec('api-keys', { createdAt: 'instant', id: 'uuid' })
export type ApiKeyPageKey = CursorKey<typeof ApiKeyCursor>

/**
 * The organization's keys, newest first; in a state as of `now` when one is given, after `after`
 * (keyset paging on the organization's (organization_id, created_at) index), `limit` of them or all.
 */
export function listApiKeys(
  db: Executor,
  tenant: TenantScope,
  options: {
    now: Date
    state?: ApiKeyState | undefined
    after?: ApiKeyPageKey | undefined
    limit: number | null
  },
): Promise<ApiKeyRow[]> {
  const { now, state, after, limit } = options
  let query = db.selectFrom('api_keys').selectAll().where('organization_id', '=', tenant.organizationId)
  if (state === 'revoked') query = query.where('revoked_at', 'is not', null)
  if (state === 'active')
    query = query
      .where('revoked_at', 'is', null)
      .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)]))
  if (state === 'expired') query = query.where('revoked_at', 'is', null).where('expires_at', '<=', now)
  if (after)
    query = query.where((eb) => eb(eb.refTuple('created_at', 'id'), '<', eb.tuple(after.createdAt, after.id)))
  query = query.orderBy('created_at', 'desc').orderBy('id', 'desc')
  return (limit === null ? query : query.limit(limit)).execute()
}

/** Records last use times gathered in memory, never moving one backwards. */
export async function recordApiKeyUse(db: Executor, uses: Map<string, Date>): Promise<void> {
  for (const [id, at] of uses) {
    await db
      .updateTable('api_keys')
      .set({ last_used_at: sql`greatest(coalesce(last_used_at, ${at}), ${at})` })
      .where('id', '=', id)
      .execute()
  }
}
