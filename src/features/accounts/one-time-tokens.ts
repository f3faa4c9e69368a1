import { type Selectable, sql } from 'kysely'
import type { Executor, OneTimeTokenPurpose, OneTimeTokenTable, Tx } from '../../db/schema.ts'

export type OneTimeTokenRow = Selectable<OneTimeTokenTable>

export async function insertOneTimeToken(
  trx: Tx,
  values: {
    accountId: string
    purpose: OneTimeTokenPurpose
    tokenHash: string
    codeHash: string
    now: Date
    expiresAt: Date
  },
): Promise<void> {
  await trx
    .insertInto('one_time_tokens')
    .values({
      account_id: values.accountId,
      purpose: values.purpose,
      token_hash: values.tokenHash,
      code_hash: values.codeHash,
      created_at: values.now,
      expires_at: values.expiresAt,
    })
    .execute()
}

/**
 * Uses a token atomically (by its id, once checked): of concurrent callers exactly one gets the row
 * back; a token whose wrong codes reached `maxAttempts` is spent.
 */
export function consumeOneTimeToken(
  trx: Tx,
  id: string,
  now: Date,
  maxAttempts: number,
): Promise<OneTimeTokenRow | undefined> {
  return trx
    .updateTable('one_time_tokens')
    .set({ used_at: now })
    .where('id', '=', id)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .where('attempts', '<', maxAttempts)
    .returningAll()
    .executeTakeFirst()
}

/**
 * Claims one code attempt on the newest live token with a code of the account with this address (an
 * invitation or a reset: the confirm endpoint takes either), in one statement whether or not the
 * address has an account, and before the code is compared, so of any burst of guesses at most
 * `maxAttempts` are ever compared. A code works only for tokens issued after `codesIssuedAfter` (the
 * link itself lasts its purpose's lifetime).
 */
export function claimOneTimeCodeAttempt(
  db: Executor,
  email: string,
  now: Date,
  codesIssuedAfter: Date,
  maxAttempts: number,
): Promise<OneTimeTokenRow | undefined> {
  return db
    .updateTable('one_time_tokens')
    .set((eb) => ({ attempts: eb('attempts', '+', 1) }))
    .where(
      'id',
      '=',
      db
        .selectFrom('one_time_tokens')
        .innerJoin('accounts', 'accounts.id', 'one_time_tokens.account_id')
        .select('one_time_tokens.id')
        .where(sql`lower(accounts.email)`, '=', email.toLowerCase())
        .where('code_hash', 'is not', null)
        .where('one_time_tokens.used_at', 'is', null)
        .where('one_time_tokens.expires_at', '>', now)
        .where('one_time_tokens.created_at', '>', codesIssuedAfter)
        .orderBy('one_time_tokens.created_at', 'desc')
        .limit(1),
    )
    .where('attempts', '<', maxAttempts)
    .returningAll()
    .executeTakeFirst()
}

/** Gives back the attempt of a right code: only wrong codes count towards the end of a token. */
export async function refundOneTimeCodeAttempt(db: Executor, id: string): Promise<void> {
  await db
    .updateTable('one_time_tokens')
    .set((eb) => ({ attempts: sql<number>`greatest(${eb.ref('attempts')} - 1, 0)` }))
    .where('id', '=', id)
    .execute()
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
