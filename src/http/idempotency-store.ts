import { type Selectable, sql } from 'kysely'
import type { Executor, IdempotencyKeyTable } from '../db/schema.ts'

// Idempotency keys (src/http/idempotency.ts). Every query names the principal: a key is only ever
// seen by the principal that sent it.

export type IdempotencyKeyRow = Selectable<IdempotencyKeyTable>

/** Claims the key for a new request; undefined when the principal already used it (the row then tells). */
export async function claimIdempotencyKey(
  db: Executor,
  values: { principalId: string; key: string; fingerprint: string; now: Date },
): Promise<boolean> {
  const row = await db
    .insertInto('idempotency_keys')
    .values({
      principal_id: values.principalId,
      key: values.key,
      fingerprint: values.fingerprint,
      created_at: values.now,
    })
    .onConflict((oc) => oc.columns(['principal_id', 'key']).doNothing())
    .returning('key')
    .executeTakeFirst()
  return row !== undefined
}

export function findIdempotencyKey(
  db: Executor,
  principalId: string,
  key: string,
): Promise<IdempotencyKeyRow | undefined> {
  return db
    .selectFrom('idempotency_keys')
    .selectAll()
    .where('principal_id', '=', principalId)
    .where('key', '=', key)
    .executeTakeFirst()
}

/** Records the answer of the request that claimed the key. */
export async function recordIdempotentAnswer(
  db: Executor,
  principalId: string,
  key: string,
  answer: { status: number; location: string | null; body: string },
): Promise<void> {
  await db
    .updateTable('idempotency_keys')
    .set({ status: answer.status, location: answer.location, body: answer.body })
    .where('principal_id', '=', principalId)
    .where('key', '=', key)
    .execute()
}

/** Gives an unanswered key back (its request failed), so a retry with it runs again. */
export async function releaseIdempotencyKey(db: Executor, principalId: string, key: string): Promise<void> {
  await db
    .deleteFrom('idempotency_keys')
    .where('principal_id', '=', principalId)
    .where('key', '=', key)
    .where('status', 'is', null)
    .execute()
}

/** Keys used before the cutoff (retention). */
export async function deleteExpiredIdempotencyKeys(
  db: Executor,
  cutoff: Date,
  limit: number,
): Promise<number> {
  const result = await sql`
    delete from idempotency_keys where ctid in (
      select ctid from idempotency_keys where created_at < ${cutoff} limit ${limit}
    )`.execute(db)
  return Number(result.numAffectedRows ?? 0)
}
