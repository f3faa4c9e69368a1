import { type Selectable, sql } from 'kysely'
import type { AccountTable, Executor, Role } from '../db/schema.ts'

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

/**
 * Counts one failed attempt atomically, unless the account is locked at `now`. Reaching `max`
 * locks it until `lockedUntil`; a lock that has expired starts a new count. Returns the new state,
 * or undefined when the account was already locked (the attempt is not counted).
 */
export function recordFailedAttempt(
  db: Executor,
  id: string,
  now: Date,
  max: number,
  lockedUntil: Date,
): Promise<{ failed_attempts: number; locked_until: Date | null } | undefined> {
  const expiredLock = sql<boolean>`(locked_until is not null and locked_until <= ${now})`
  const next = sql<number>`case when ${expiredLock} then 1 else failed_attempts + 1 end`
  return db
    .updateTable('accounts')
    .set({
      failed_attempts: next,
      locked_until: sql`case when ${next} >= ${max} then ${lockedUntil}::timestamptz when ${expiredLock} then null else locked_until end`,
      updated_at: now,
    })
    .where('id', '=', id)
    .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<=', now)]))
    .returning(['failed_attempts', 'locked_until'])
    .executeTakeFirst()
}

export async function clearFailedAttempts(db: Executor, id: string, now: Date): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ failed_attempts: 0, locked_until: null, updated_at: now })
    .where('id', '=', id)
    .where((eb) => eb.or([eb('failed_attempts', '>', 0), eb('locked_until', 'is not', null)]))
    .execute()
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
