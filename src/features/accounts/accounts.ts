import type { Config } from '../../config.ts'
import type { Executor, Role, Tx } from '../../db/schema.ts'
import { AppError, validationFailed } from '../../errors.ts'
import { type AccountRow, findAccount } from './repository.ts'

/**
 * The caller's account row when it is an active admin of `organizationId`, read through `db` (the
 * operation's transaction where it has one); 403 ACCESS_DENIED otherwise. Every administration of
 * an organization (its users, impersonation, single sign-on) is decided by this, never by the
 * authorization server.
 */
export async function organizationAdmin(
  db: Executor,
  userId: string,
  organizationId: string,
): Promise<AccountRow> {
  const account = await findAccount(db, userId)
  if (!account?.active || account.role !== 'admin' || account.organization_id !== organizationId) {
    throw new AppError('ACCESS_DENIED', 'This operation needs an organization admin')
  }
  return account
}

export const PASSWORD_MAX_LENGTH = 256
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/

export function normalizeEmail(email: string): string {
  const trimmed = email.trim()
  if (trimmed.length > 320 || !EMAIL.test(trimmed)) {
    throw validationFailed('email', 'is not a valid email address', 'The email address is not valid')
  }
  return trimmed
}

/** The password policy: length between the configured minimum and 256 characters. */
export function checkPasswordPolicy(config: Config, password: string): void {
  const min = config.auth.password.minLength
  const length = [...password].length
  if (length < min || length > PASSWORD_MAX_LENGTH) {
    throw new AppError(
      'WEAK_PASSWORD',
      `The password must be ${min} to ${PASSWORD_MAX_LENGTH} characters long`,
    )
  }
}

/** The tuple that makes an account `admin` or `member` of its organization. */
export function roleTuple(
  operation: 'write' | 'delete',
  account: Pick<AccountRow, 'id' | 'role' | 'organization_id'>,
) {
  return {
    operation,
    subject: `user:${account.id}`,
    relation: account.role,
    object: `organization:${account.organization_id}`,
  }
}

export interface NewAccount {
  organizationId: string
  email: string
  role: Role
  password: string
}

/**
 * Ends every session of an account in the caller's transaction (deactivation, a password set by a
 * reset link). The sessions feature owns the sessions; the composition root hands its function in.
 */
export type EndUserSessions = (trx: Tx, userId: string, now: Date, reason: string) => Promise<unknown>

/**
 * Ends every session of an account but `keepSessionId`, in the caller's transaction (a password
 * changed from a signed-in session, which stays). Handed in by the composition root, as above.
 */
export type EndOtherSessions = (
  trx: Tx,
  userId: string,
  keepSessionId: string,
  now: Date,
  reason: string,
) => Promise<unknown>

/** 401 ACCOUNT_LOCKED with Retry-After: the seconds until the lock ends. */
export const accountLocked = (until: Date, now: Date) =>
  new AppError('ACCOUNT_LOCKED', 'The account is temporarily locked after too many failed attempts', {
    headers: { 'retry-after': String(Math.max(1, Math.ceil((until.getTime() - now.getTime()) / 1000))) },
  })
