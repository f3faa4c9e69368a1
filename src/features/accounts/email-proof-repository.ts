import { type Selectable, sql } from 'kysely'
import type { EmailProofPurpose, EmailProofTable, Executor, Tx } from '../../db/schema.ts'

export type EmailProofRow = Selectable<EmailProofTable>

export async function insertEmailProof(
  trx: Tx,
  values: {
    purpose: EmailProofPurpose
    email: string
    accountId: string | null
    tokenHash: string
    codeHash: string
    data: Record<string, unknown>
    now: Date
    expiresAt: Date
  },
): Promise<void> {
  await trx
    .insertInto('email_proofs')
    .values({
      purpose: values.purpose,
      email: values.email,
      account_id: values.accountId,
      token_hash: values.tokenHash,
      code_hash: values.codeHash,
      data: JSON.stringify(values.data),
      created_at: values.now,
      expires_at: values.expiresAt,
    })
    .execute()
}

/**
 * Retires the live proofs of a purpose for an address, and those of an account when one is given
 * (its email change to another address), so only the newest works.
 */
export async function retireEmailProofs(
  trx: Tx,
  purpose: EmailProofPurpose,
  email: string,
  accountId: string | null,
  now: Date,
): Promise<void> {
  await trx
    .updateTable('email_proofs')
    .set({ used_at: now })
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .where((eb) =>
      accountId === null
        ? eb(sql`lower(email)`, '=', email.toLowerCase())
        : eb.or([eb(sql`lower(email)`, '=', email.toLowerCase()), eb('account_id', '=', accountId)]),
    )
    .execute()
}

/** Retires every live proof that acts on the account (its address changed, it was deactivated). */
export async function retireAccountEmailProofs(trx: Tx, accountId: string, now: Date): Promise<void> {
  await trx
    .updateTable('email_proofs')
    .set({ used_at: now })
    .where('account_id', '=', accountId)
    .where('used_at', 'is', null)
    .execute()
}

/** The proof of a link's token, if it is still live: unused, unexpired, not ended by wrong codes. */
export function findLiveProofByToken(
  db: Executor,
  purpose: EmailProofPurpose,
  tokenHash: string,
  now: Date,
  maxAttempts: number,
): Promise<EmailProofRow | undefined> {
  return db
    .selectFrom('email_proofs')
    .selectAll()
    .where('token_hash', '=', tokenHash)
    .where('purpose', '=', purpose)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .where('attempts', '<', maxAttempts)
    .executeTakeFirst()
}

/**
 * Claims one code attempt on the live proof of a purpose for an address, in one statement and
 * before the code is compared: of any burst of guesses, at most `maxAttempts` are ever compared.
 * Undefined when there is no live proof or its attempts are spent.
 */
export function claimCodeAttempt(
  db: Executor,
  purpose: EmailProofPurpose,
  email: string,
  now: Date,
  maxAttempts: number,
): Promise<EmailProofRow | undefined> {
  return db
    .updateTable('email_proofs')
    .set((eb) => ({ attempts: eb('attempts', '+', 1) }))
    .where(
      'id',
      '=',
      db
        .selectFrom('email_proofs')
        .select('id')
        .where('purpose', '=', purpose)
        .where(sql`lower(email)`, '=', email.toLowerCase())
        .where('used_at', 'is', null)
        .where('expires_at', '>', now)
        .orderBy('created_at', 'desc')
        .limit(1),
    )
    .where('attempts', '<', maxAttempts)
    .returningAll()
    .executeTakeFirst()
}

/** Gives back the attempt of a right code (the proof is used, or kept for a second factor). */
export async function refundCodeAttempt(db: Executor, id: string): Promise<void> {
  await db
    .updateTable('email_proofs')
    .set((eb) => ({ attempts: sql<number>`greatest(${eb.ref('attempts')} - 1, 0)` }))
    .where('id', '=', id)
    .execute()
}

/** Uses a live proof atomically: of concurrent callers exactly one gets true. */
export async function useEmailProof(trx: Tx, id: string, now: Date, maxAttempts: number): Promise<boolean> {
  const result = await trx
    .updateTable('email_proofs')
    .set({ used_at: now })
    .where('id', '=', id)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .where('attempts', '<', maxAttempts)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/** Retention: proofs used or expired before `before`. */
export async function deleteSpentEmailProofs(db: Executor, before: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('email_proofs')
    .where(
      'id',
      'in',
      db
        .selectFrom('email_proofs')
        .select('id')
        .where((eb) => eb.or([eb('used_at', '<', before), eb('expires_at', '<', before)]))
        .limit(limit),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
