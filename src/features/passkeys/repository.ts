import { type Selectable, sql } from 'kysely'
import type { Executor, PasskeyChallengeTable, PasskeyTable } from '../../db/schema.ts'

export type PasskeyRow = Selectable<PasskeyTable>
export type ChallengeRow = Selectable<PasskeyChallengeTable>

export async function insertChallenge(
  db: Executor,
  values: {
    ceremony: ChallengeRow['ceremony']
    challenge: string
    sessionId: string | null
    accountId: string | null
    now: Date
    expiresAt: Date
  },
): Promise<string> {
  const row = await db
    .insertInto('passkey_challenges')
    .values({
      ceremony: values.ceremony,
      challenge: values.challenge,
      session_id: values.sessionId,
      account_id: values.accountId,
      created_at: values.now,
      expires_at: values.expiresAt,
    })
    .returning('id')
    .executeTakeFirstOrThrow()
  return row.id
}

/** Uses an authentication challenge: gone once read, and only while it has not expired. */
export function consumeAuthenticationChallenge(
  db: Executor,
  id: string,
  now: Date,
): Promise<ChallengeRow | undefined> {
  return db
    .deleteFrom('passkey_challenges')
    .where('id', '=', id)
    .where('ceremony', '=', 'authentication')
    .where('expires_at', '>', now)
    .returningAll()
    .executeTakeFirst()
}

/** Uses the registration challenge the session asked for, if it is this one and still valid. */
export async function consumeRegistrationChallenge(
  db: Executor,
  values: { sessionId: string; accountId: string; challenge: string; now: Date },
): Promise<boolean> {
  const row = await db
    .deleteFrom('passkey_challenges')
    .where('ceremony', '=', 'registration')
    .where('session_id', '=', values.sessionId)
    .where('account_id', '=', values.accountId)
    .where('challenge', '=', values.challenge)
    .where('expires_at', '>', values.now)
    .returning('id')
    .executeTakeFirst()
  return row !== undefined
}

export function deleteExpiredChallenges(db: Executor, now: Date, limit: number): Promise<number> {
  return sql<{ count: string }>`
    with gone as (
      delete from passkey_challenges where id in (
        select id from passkey_challenges where expires_at <= ${now} limit ${limit}
      ) returning 1
    ) select count(*) as count from gone`
    .execute(db)
    .then(({ rows }) => Number(rows[0]?.count ?? 0))
}

export function listPasskeys(db: Executor, accountId: string): Promise<PasskeyRow[]> {
  return db
    .selectFrom('passkeys')
    .selectAll()
    .where('account_id', '=', accountId)
    .orderBy('created_at')
    .orderBy('id')
    .execute()
}

/**
 * The account a username names and its passkeys' ids, in one statement whether or not the account
 * exists or has any (so the answer costs the same either way).
 */
export async function credentialsOfUsername(
  db: Executor,
  username: string,
): Promise<{
  account: { id: string; usable: boolean } | undefined
  credentials: { id: string; transports: string[] }[]
}> {
  const rows = await db
    .selectFrom('accounts')
    .leftJoin('passkeys', 'passkeys.account_id', 'accounts.id')
    .select(['accounts.id', 'passkeys.credential_id', 'passkeys.transports'])
    .select(sql<boolean>`accounts.active and accounts.deactivated_at is null`.as('usable'))
    .where(sql`lower(accounts.email)`, '=', username.trim().toLowerCase())
    .execute()
  const first = rows[0]
  return {
    account: first ? { id: first.id, usable: first.usable } : undefined,
    credentials: rows.flatMap((row) =>
      row.credential_id ? [{ id: row.credential_id, transports: row.transports ?? [] }] : [],
    ),
  }
}

export type PasskeyWithAccount = PasskeyRow & {
  email: string
  active: boolean
  deactivated_at: Date | null
  locked_until: Date | null
  otp_enabled: boolean
}

/** A credential and the state of its account (and that its organization exists). */
export function findPasskeyWithAccount(
  db: Executor,
  credentialId: string,
): Promise<PasskeyWithAccount | undefined> {
  return db
    .selectFrom('passkeys')
    .innerJoin('accounts', 'accounts.id', 'passkeys.account_id')
    .innerJoin('organizations', 'organizations.id', 'accounts.organization_id')
    .selectAll('passkeys')
    .select([
      'accounts.email',
      'accounts.active',
      'accounts.deactivated_at',
      'accounts.locked_until',
      'accounts.otp_enabled',
    ])
    .where('passkeys.credential_id', '=', credentialId)
    .executeTakeFirst()
}

export function insertPasskey(
  db: Executor,
  values: Omit<PasskeyRow, 'id' | 'last_used_at' | 'counter'> & { counter: number },
): Promise<PasskeyRow> {
  return db.insertInto('passkeys').values(values).returningAll().executeTakeFirstOrThrow()
}

/** The new counter and use of a credential; the counter only moves forward (a race keeps the larger). */
export async function recordPasskeyUse(
  db: Executor,
  values: { id: string; counter: number; backedUp: boolean; now: Date },
): Promise<void> {
  await db
    .updateTable('passkeys')
    .set({
      counter: sql`greatest(counter, ${values.counter}::bigint)`,
      backed_up: values.backedUp,
      last_used_at: values.now,
    })
    .where('id', '=', values.id)
    .execute()
}

export function renamePasskey(
  db: Executor,
  accountId: string,
  id: string,
  name: string,
): Promise<PasskeyRow | undefined> {
  return db
    .updateTable('passkeys')
    .set({ name })
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .returningAll()
    .executeTakeFirst()
}

export function deletePasskey(db: Executor, accountId: string, id: string): Promise<PasskeyRow | undefined> {
  return db
    .deleteFrom('passkeys')
    .where('id', '=', id)
    .where('account_id', '=', accountId)
    .returningAll()
    .executeTakeFirst()
}
