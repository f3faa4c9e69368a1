import type { Kysely } from 'kysely'
import type { TupleRecorder } from '../authz/tuples.ts'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import { inTransaction } from '../db/database.ts'
import type { Database, Role } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { type AccountRow, insertAccount } from '../repositories/accounts.ts'
import { findOrganization } from '../repositories/organizations.ts'
import type { PasswordHasher } from './passwords.ts'

export const PASSWORD_MAX_LENGTH = 256
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/

export function normalizeEmail(email: string): string {
  const trimmed = email.trim()
  if (trimmed.length > 320 || !EMAIL.test(trimmed)) {
    throw new AppError('VALIDATION_FAILED', 'The email address is not valid', {
      extensions: { errors: [{ path: 'email', message: 'is not a valid email address' }] },
    })
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

/** The tuple that makes an account `admin` or `member` of its organization (spec 2.12). */
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

const isUniqueViolation = (error: unknown) => (error as { code?: string })?.code === '23505'

export interface NewAccount {
  organizationId: string
  email: string
  role: Role
  password: string
}

/** Creates an active account with a password (operations CLI, demo seed). */
export async function createAccount(
  db: Kysely<Database>,
  deps: { config: Config; passwords: PasswordHasher; clock: Clock; authz: { tuples: TupleRecorder } },
  input: NewAccount,
): Promise<AccountRow> {
  const email = normalizeEmail(input.email)
  checkPasswordPolicy(deps.config, input.password)
  const passwordHash = await deps.passwords.hash(input.password)
  try {
    return await inTransaction(db, async (trx) => {
      if (!(await findOrganization(trx, input.organizationId))) {
        throw new AppError('NOT_FOUND', 'No such organization')
      }
      const account = await insertAccount(trx, {
        organizationId: input.organizationId,
        email,
        passwordHash,
        role: input.role,
        active: true,
      })
      await deps.authz.tuples.record(trx, [roleTuple('write', account)], deps.clock.now())
      return account
    })
  } catch (error) {
    if (isUniqueViolation(error))
      throw new AppError('ACCOUNT_EXISTS', 'An account with this email already exists')
    throw error
  }
}
