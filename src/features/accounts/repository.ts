import { type Selectable, sql } from 'kysely'
import type { AccountTable, Executor, Role } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import { isUuid } from '../../uuid.ts'

export type AccountRow = Selectable<AccountTable>

export function findAccountByEmail(db: Executor, email: string): Promise<AccountRow | undefined> {
  return db
    .selectFrom('accounts')
    .selectAll()
    .where(sql`lower(email)`, '=', email.toLowerCase())
    .executeTakeFirst()
}

export function findAccount(db: Executor, id: string): Promise<AccountRow | undefined> {
  return db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst()
}

/**
 * The organization's accounts among `ids`, in one statement: accounts of other organizations are
 * not read. Ids that cannot be account ids (not UUIDs: service accounts, machine names) are skipped.
 */
export function findAccountsOfOrganization(
  db: Executor,
  tenant: TenantScope,
  ids: readonly string[],
): Promise<Pick<AccountRow, 'id' | 'email'>[]> {
  const candidates = [...new Set(ids)].filter((id) => isUuid(id))
  if (candidates.length === 0) return Promise.resolve([])
  return db
    .selectFrom('accounts')
    .select(['id', 'email'])
    .where('organization_id', '=', tenant.organizationId)
    .where((eb) => eb('id', '=', eb.fn.any(sql<string[]>`${candidates}::uuid[]`)))
    .execute()
}

export function insertAccount(
  db: Executor,
  values: { organizationId: string; email: string; passwordHash: string; role: Role; active: boolean },
): Promise<AccountRow> {
  return db
    .insertInto('accounts')
    .values({
      organization_id: values.organizationId,
      email: values.email,
      password_hash: values.passwordHash,
      role: values.role,
      active: values.active,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

export interface ClaimedAttempt {
  account: AccountRow
  /** The account was locked before this attempt: it was not counted and gets no verification. */
  wasLocked: boolean
}

/**
 * Claims one login attempt of an active account, in one statement and before any password is
 * verified: the attempt is counted as failed up front (a success clears it later), and reaching
 * `max` locks the account until `lockedUntil`; an expired lock starts a new count. While locked the
 * attempt is refused and not counted as a failure, only as refused. So of any burst, at most `max`
 * attempts per lockout window are ever verified. Unknown and inactive accounts: undefined.
 */
export async function claimLoginAttempt(
  db: Executor,
  email: string,
  now: Date,
  max: number,
  lockedUntil: Date,
): Promise<ClaimedAttempt | undefined> {
  const result = await sql<AccountRow & { was_locked: boolean }>`
    with old as (
      select id, failed_attempts, locked_until, (locked_until is not null and locked_until > ${now}) as locked,
             (locked_until is not null and locked_until <= ${now}) as expired
      from accounts where lower(email) = ${email.toLowerCase()} and active
      for update
    ), next as (
      select id, locked, expired, locked_until,
             case when locked then failed_attempts when expired then 1 else failed_attempts + 1 end as n
      from old
    )
    update accounts a set
      failed_attempts = next.n,
      locked_until = case when next.locked then next.locked_until
                          when next.n >= ${max} then ${lockedUntil}::timestamptz else null end,
      refused_attempts = case when next.locked then a.refused_attempts + 1
                              when next.expired then 0 else a.refused_attempts end,
      updated_at = ${now}
    from next where a.id = next.id
    returning a.*, next.locked as was_locked`.execute(db)
  const row = result.rows[0]
  if (!row) return undefined
  const { was_locked, ...account } = row
  return { account, wasLocked: was_locked }
}

/**
 * Ends a claimed attempt whose password was right: clears the failure count (`release: 'clear'`,
 * a successful login) or gives back just this attempt (`'refund'`, the second factor is still
 * missing). Refused while the account is locked and an attempt has been refused since the lock:
 * the burst went past the limit. False then, and the caller answers ACCOUNT_LOCKED.
 */
export async function settleLoginAttempt(
  db: Executor,
  accountId: string,
  now: Date,
  max: number,
  release: 'clear' | 'refund',
): Promise<boolean> {
  const failed = release === 'clear' ? sql<number>`0` : sql<number>`greatest(failed_attempts - 1, 0)`
  const result = await db
    .updateTable('accounts')
    .set({
      failed_attempts: failed,
      locked_until: sql`case when ${failed} < ${max} then null else locked_until end`,
      refused_attempts: 0,
      updated_at: now,
    })
    .where('id', '=', accountId)
    .where((eb) =>
      eb.or([eb('locked_until', 'is', null), eb('locked_until', '<=', now), eb('refused_attempts', '=', 0)]),
    )
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

export async function updatePasswordHash(
  db: Executor,
  id: string,
  passwordHash: string,
  now: Date,
): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ password_hash: passwordHash, updated_at: now })
    .where('id', '=', id)
    .execute()
}

export async function incrementSessionVersion(db: Executor, id: string): Promise<void> {
  await db
    .updateTable('accounts')
    .set((eb) => ({ session_version: eb('session_version', '+', 1) }))
    .where('id', '=', id)
    .execute()
}

export async function findSessionVersion(db: Executor, id: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('accounts')
    .select('session_version')
    .where('id', '=', id)
    .executeTakeFirst()
  return row?.session_version
}

export function listAccounts(db: Executor, organizationId: string): Promise<AccountRow[]> {
  return db
    .selectFrom('accounts')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .orderBy(sql`lower(email)`)
    .execute()
}

/** Ends the account's lock and its failure count now (operators, `user unlock`); undefined: no such account. */
export function unlockAccount(db: Executor, email: string, now: Date): Promise<{ id: string } | undefined> {
  return db
    .updateTable('accounts')
    .set({ failed_attempts: 0, locked_until: null, refused_attempts: 0, updated_at: now })
    .where(sql`lower(email)`, '=', email.trim().toLowerCase())
    .returning('id')
    .executeTakeFirst()
}

/** The organization's account, locked for the rest of the transaction; undefined in any other organization. */
export function lockAccountOfOrganization(
  trx: Executor,
  tenant: TenantScope,
  id: string,
): Promise<AccountRow | undefined> {
  return trx
    .selectFrom('accounts')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst()
}

/**
 * Locks the organization's active admins (in id order, so two transactions cannot deadlock) and
 * returns how many there are.
 */
export async function lockActiveAdmins(trx: Executor, tenant: TenantScope): Promise<number> {
  const rows = await trx
    .selectFrom('accounts')
    .select('id')
    .where('organization_id', '=', tenant.organizationId)
    .where('role', '=', 'admin')
    .where('active', '=', true)
    .orderBy('id')
    .forUpdate()
    .execute()
  return rows.length
}

/** Deactivates (deactivatedAt set) or reactivates (null) an account of the organization. */
export async function setAccountActive(
  trx: Executor,
  tenant: TenantScope,
  id: string,
  state: { active: boolean; deactivatedAt: Date | null },
  now: Date,
): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({ active: state.active, deactivated_at: state.deactivatedAt, updated_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .execute()
}

/** Sets a new password: the account becomes active and its lockout is cleared. */
export async function setNewPassword(
  trx: Executor,
  id: string,
  passwordHash: string,
  now: Date,
): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({
      password_hash: passwordHash,
      active: true,
      failed_attempts: 0,
      locked_until: null,
      updated_at: now,
    })
    .where('id', '=', id)
    .execute()
}
