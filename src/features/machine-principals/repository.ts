import { type Selectable, sql } from 'kysely'
import type { ApiKeyTable, Executor, ServiceAccountTable, Tx } from '../../db/schema.ts'

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
  values: {
    organizationId: string
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
      organization_id: values.organizationId,
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

/** Revokes an active key; undefined when it does not exist or was already revoked. */
export function revokeApiKey(trx: Tx, id: string, now: Date): Promise<ApiKeyRow | undefined> {
  return trx
    .updateTable('api_keys')
    .set({ revoked_at: now })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returningAll()
    .executeTakeFirst()
}

export function findApiKey(db: Executor, id: string): Promise<ApiKeyRow | undefined> {
  return db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst()
}

export function listApiKeys(db: Executor, organizationId: string): Promise<ApiKeyRow[]> {
  return db
    .selectFrom('api_keys')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .orderBy('created_at', 'desc')
    .execute()
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
