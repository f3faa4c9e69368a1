import type { Selectable } from 'kysely'
import type { Executor, OneTimeTokenPurpose, OneTimeTokenTable, Tx } from '../../db/schema.ts'

export type OneTimeTokenRow = Selectable<OneTimeTokenTable>

export async function insertOneTimeToken(
  trx: Tx,
  values: { accountId: string; purpose: OneTimeTokenPurpose; tokenHash: string; now: Date; expiresAt: Date },
): Promise<void> {
  await trx
    .insertInto('one_time_tokens')
    .values({
      account_id: values.accountId,
      purpose: values.purpose,
      token_hash: values.tokenHash,
      created_at: values.now,
      expires_at: values.expiresAt,
    })
    .execute()
}

/** Uses a token atomically: of concurrent callers exactly one gets the row back. */
export function consumeOneTimeToken(
  trx: Tx,
  tokenHash: string,
  now: Date,
): Promise<OneTimeTokenRow | undefined> {
  return trx
    .updateTable('one_time_tokens')
    .set({ used_at: now })
    .where('token_hash', '=', tokenHash)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returningAll()
    .executeTakeFirst()
}

/** Retires the account's outstanding tokens (of one purpose, or all), so older links stop working. */
export async function retireOneTimeTokens(
  trx: Tx,
  accountId: string,
  now: Date,
  purpose?: OneTimeTokenPurpose,
): Promise<void> {
  let query = trx
    .updateTable('one_time_tokens')
    .set({ used_at: now })
    .where('account_id', '=', accountId)
    .where('used_at', 'is', null)
  if (purpose) query = query.where('purpose', '=', purpose)
  await query.execute()
}

export function findOneTimeToken(db: Executor, tokenHash: string): Promise<OneTimeTokenRow | undefined> {
  return db.selectFrom('one_time_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst()
}

/** One-time tokens used or expired before the cutoff; returns how many went. */
export async function deleteSpentOneTimeTokens(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('one_time_tokens')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('one_time_tokens')
        .select('id')
        .where((w) => w.or([w('used_at', '<', cutoff), w('expires_at', '<', cutoff)]))
        .limit(limit),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
