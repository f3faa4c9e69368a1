import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import {
  type AccountRow,
  clearFailedAttempts,
  findAccountByEmail,
  recordFailedAttempt,
  updatePasswordHash,
} from '../repositories/accounts.ts'
import type { PasswordHasher } from './passwords.ts'

export interface Credentials {
  username: string
  password: string
  otpCode?: string | undefined
}

export interface AuthenticatedUser {
  userId: string
  organizationId: string
}

/**
 * Extension point (spec 5.6): turns credentials into a user, or null. It may throw an AppError
 * (ACCOUNT_LOCKED, OTP_REQUIRED, INVALID_OTP) for a more specific answer. A deployment with its
 * own user table supplies one through `buildApp(config, { authenticator })`.
 */
export interface CredentialAuthenticator {
  authenticate(credentials: Credentials): Promise<AuthenticatedUser | null>
}

/** Second-factor check used by the built-in authenticator; the account-management feature supplies it. */
export type SecondFactorCheck = (account: AccountRow, otpCode: string | undefined) => Promise<boolean>

export interface AccountAuthenticatorDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
}

/**
 * The built-in authenticator on the account table. Unknown, deactivated and wrong-password logins
 * do the same work (one argon2 verification) and give the same answer. Failed attempts are counted
 * in one atomic statement, so parallel attempts cannot exceed the limit.
 */
export class AccountAuthenticator implements CredentialAuthenticator {
  readonly #deps: AccountAuthenticatorDeps
  #secondFactor: SecondFactorCheck | null = null

  constructor(deps: AccountAuthenticatorDeps) {
    this.#deps = deps
  }

  useSecondFactor(check: SecondFactorCheck): void {
    this.#secondFactor = check
  }

  async authenticate({ username, password, otpCode }: Credentials): Promise<AuthenticatedUser | null> {
    const { db, clock, passwords } = this.#deps
    const account = await findAccountByEmail(db, username.trim())
    if (!account) {
      await passwords.verifyNothing(password)
      return null
    }
    const now = clock.now()
    const passwordMatches = await passwords.verify(account.password_hash, password)
    // A deactivated account is indistinguishable from a wrong password, even while locked.
    if (!account.active) return null
    if (account.locked_until && account.locked_until > now) {
      throw new AppError('ACCOUNT_LOCKED', 'The account is temporarily locked after too many failed attempts')
    }
    if (!passwordMatches) {
      await this.#countFailure(account.id, now)
      return null
    }
    if (this.#secondFactor && !(await this.#secondFactor(account, otpCode))) {
      // The second-factor check throws OTP_REQUIRED / INVALID_OTP itself; false means "count it".
      await this.#countFailure(account.id, now)
      throw new AppError('INVALID_OTP', 'The one-time password is not valid')
    }
    await clearFailedAttempts(db, account.id, now)
    if (passwords.needsRehash(account.password_hash)) {
      await updatePasswordHash(db, account.id, await passwords.hash(password), now)
    }
    return { userId: account.id, organizationId: account.organization_id }
  }

  async #countFailure(accountId: string, now: Date): Promise<void> {
    const { db, config } = this.#deps
    const { maxAttempts, durationMinutes } = config.auth.lockout
    const lockedUntil = new Date(now.getTime() + durationMinutes * 60_000)
    const counted = await recordFailedAttempt(db, accountId, now, maxAttempts, lockedUntil)
    // Not counted means a parallel attempt locked the account first.
    if (!counted)
      throw new AppError('ACCOUNT_LOCKED', 'The account is temporarily locked after too many failed attempts')
  }
}
