import type { Selectable } from 'kysely'
import type { Executor, OneTimeTokenPurpose, OneTimeTokenTable, Tx } from '../db/schema.ts'

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

/** Retires every other outstanding token of the account, so an older link stops working. */
export async function retireOneTimeTokens(trx: Tx, accountId: string, now: Date): Promise<void> {
  await trx
    .updateTable('one_time_tokens')
    .set({ used_at: now })
    .where('account_id', '=', accountId)
    .where('used_at', 'is', null)
    .execute()
}

export function findOneTimeToken(db: Executor, tokenHash: string): Promise<OneTimeTokenRow | undefined> {
  return db.selectFrom('one_time_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst()
}
