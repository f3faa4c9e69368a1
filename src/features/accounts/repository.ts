import { type ExpressionBuilder, type Selectable, sql } from 'kysely'
import { type CursorKey, cursorCodec } from '../../db/paging.ts'
import type { AccountTable, Database, Executor, Role } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import { PasswordHasher } from '../../security/passwords.ts'
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

interface NewAccountValues {
  organizationId: string
  email: string
  passwordHash: string
  role: Role
  active: boolean
}

const accountColumns = (values: NewAccountValues) => ({
  organization_id: values.organizationId,
  email: values.email,
  password_hash: values.passwordHash,
  role: values.role,
  active: values.active,
})

export function insertAccount(db: Executor, values: NewAccountValues): Promise<AccountRow> {
  return db.insertInto('accounts').values(accountColumns(values)).returningAll().executeTakeFirstOrThrow()
}

/**
 * Inserts the account unless an account has the address already (any letter case): undefined then,
 * having waited for a parallel insert of the same address to commit or roll back.
 */
export function insertAccountUnlessEmailTaken(
  db: Executor,
  values: NewAccountValues,
): Promise<AccountRow | undefined> {
  return db
    .insertInto('accounts')
    .values(accountColumns(values))
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst()
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

/**
 * Where an account stands, as its admins see it: derived from the columns (`active`,
 * `deactivated_at`, an invitee's unusable password hash, `locked_until`) by `statusAt`, never stored.
 */
export const USER_STATUSES = ['active', 'invited', 'deactivated', 'locked'] as const
export type UserStatus = (typeof USER_STATUSES)[number]

/** An account as its organization's admins list it (GET /api/users). */
export interface UserItemRow {
  id: string
  email: string
  role: Role
  status: UserStatus
  /** Set while the account is locked; null once the lock has passed. */
  locked_until: Date | null
  otp_enabled: boolean
  passkey_count: number
  created_at: Date
}

/**
 * The account's status at `now`: deactivated (by an admin; or inactive with a usable password, as
 * accounts deactivated before `deactivated_at` existed are), invited (inactive, still holding the
 * unusable hash it was created with), locked (active, `locked_until` ahead), or active.
 */
const statusAt = (now: Date) => sql<UserStatus>`case
    when accounts.deactivated_at is not null then 'deactivated'
    when not accounts.active and starts_with(accounts.password_hash, ${PasswordHasher.UNUSABLE_PREFIX})
      then 'invited'
    when not accounts.active then 'deactivated'
    when accounts.locked_until > ${now} then 'locked'
    else 'active' end`

/** How many passkeys the account of the outer query holds. */
const passkeyCount = (eb: ExpressionBuilder<Database, 'accounts'>, tenant: TenantScope) =>
  eb
    .selectFrom('passkeys')
    .select(sql<number>`count(*)::int`.as('n'))
    .whereRef('passkeys.account_id', '=', 'accounts.id')
    .where('passkeys.organization_id', '=', tenant.organizationId)
    .$asScalar()
    .$notNull()

/** The organization's accounts as UserItemRows, with the key they are listed by (`sort_key`). */
function userItems(db: Executor, tenant: TenantScope, now: Date) {
  return db
    .selectFrom('accounts')
    .select((eb) => [
      'accounts.id',
      'accounts.email',
      'accounts.role',
      'accounts.otp_enabled',
      'accounts.created_at',
      statusAt(now).as('status'),
      sql<Date | null>`case when accounts.locked_until > ${now} then accounts.locked_until end`.as(
        'locked_until',
      ),
      passkeyCount(eb, tenant).as('passkey_count'),
      sql<string>`lower(accounts.email)`.as('sort_key'),
    ])
    .where('accounts.organization_id', '=', tenant.organizationId)
}

/** The list's cursors: a position in its order, an account's lower-cased email (unique). */
export const UserCursor = cursorCodec('users', { lowerEmail: 'text' })
export type UserPageKey = CursorKey<typeof UserCursor>

/**
 * A page of the organization's accounts in the order of their lower-cased email, after `after`
 * (the `sort_key` of the last row of the page before), of one status or all.
 */
export function listUsers(
  db: Executor,
  tenant: TenantScope,
  options: { now: Date; status?: UserStatus | undefined; after?: UserPageKey | undefined; limit: number },
): Promise<(UserItemRow & { sort_key: string })[]> {
  let query = userItems(db, tenant, options.now)
  if (options.status) query = query.where(statusAt(options.now), '=', options.status)
  if (options.after !== undefined)
    query = query.where(sql`lower(accounts.email)`, '>', options.after.lowerEmail)
  return query.orderBy(sql`lower(accounts.email)`).limit(options.limit).execute()
}

/** One account of the organization as a UserItemRow; undefined in any other organization. */
export function findUserItem(
  db: Executor,
  tenant: TenantScope,
  id: string,
  now: Date,
): Promise<UserItemRow | undefined> {
  return userItems(db, tenant, now).where('accounts.id', '=', id).executeTakeFirst()
}

/** What GET /api/auth/me shows of the signed-in account. */
export type OwnAccountRow = Pick<AccountRow, 'id' | 'email' | 'organization_id' | 'role' | 'otp_enabled'> & {
  organization_name: string
  passkey_count: number
}

/** The signed-in account with its organization's name and its passkey count, in one statement. */
export function findOwnAccount(
  db: Executor,
  tenant: TenantScope,
  id: string,
): Promise<OwnAccountRow | undefined> {
  // A deployment's own authenticator may name users the account table does not hold.
  if (!isUuid(id)) return Promise.resolve(undefined)
  return db
    .selectFrom('accounts')
    .innerJoin('organizations', 'organizations.id', 'accounts.organization_id')
    .select((eb) => [
      'accounts.id',
      'accounts.email',
      'accounts.organization_id',
      'accounts.role',
      'accounts.otp_enabled',
      'organizations.name as organization_name',
      passkeyCount(eb, tenant).as('passkey_count'),
    ])
    .where('accounts.organization_id', '=', tenant.organizationId)
    .where('accounts.id', '=', id)
    .executeTakeFirst()
}

/** Gives an account of the organization another role. */
export async function setAccountRole(
  trx: Executor,
  tenant: TenantScope,
  id: string,
  role: Role,
  now: Date,
): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({ role, updated_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .execute()
}

/** Ends the lock of an account of the organization and its failure count (the unlock). */
export async function unlockAccountOfOrganization(
  trx: Executor,
  tenant: TenantScope,
  id: string,
  now: Date,
): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({ failed_attempts: 0, locked_until: null, refused_attempts: 0, updated_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .execute()
}

/**
 * Replaces the password hash of an active account of the organization, if it is still
 * `expectedHash` (the one the current password was verified against): false when a concurrent
 * change came first or the account is no longer active.
 */
export async function replacePasswordHash(
  trx: Executor,
  tenant: TenantScope,
  id: string,
  expectedHash: string,
  passwordHash: string,
  now: Date,
): Promise<boolean> {
  const result = await trx
    .updateTable('accounts')
    .set({ password_hash: passwordHash, updated_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .where('active', '=', true)
    .where('password_hash', '=', expectedHash)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/** Moves an active account of the organization to another address; false if it is not active any more. */
export async function setAccountEmail(
  trx: Executor,
  tenant: TenantScope,
  id: string,
  email: string,
  now: Date,
): Promise<boolean> {
  const result = await trx
    .updateTable('accounts')
    .set({ email, updated_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .where('active', '=', true)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}
