import type { Kysely } from 'kysely'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError } from '../../errors.ts'
import type { UserPrincipal } from '../../principal.ts'
import type { PasswordHasher } from '../../security/passwords.ts'
import { accountLocked, checkPasswordPolicy } from './accounts.ts'
import type { NewPasswords } from './new-password.ts'
import { claimLoginAttempt, findOwnAccount, type OwnAccountRow, settleLoginAttempt } from './repository.ts'

export interface OwnAccountDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  newPasswords: NewPasswords
}

export const notAnAccount = () => new AppError('NOT_FOUND', 'Only platform accounts have a profile here')
const wrongPassword = () => new AppError('INVALID_CREDENTIALS', 'The current password is not correct')

/**
 * The signed-in user's own account row, once `currentPassword` is found to be its password. The
 * check is a sign-in's: it claims a login attempt first (counted toward the lockout, refused while
 * locked), and an account that claims none (deactivated since its session began) costs a hash
 * verification and answers as a wrong password. Returns the hash the password was checked against.
 */
export async function confirmCurrentPassword(
  deps: Pick<OwnAccountDeps, 'db' | 'clock' | 'config' | 'passwords'>,
  user: UserPrincipal,
  currentPassword: string,
): Promise<{ account: OwnAccountRow; tenant: TenantScope; now: Date; passwordHash: string }> {
  const { db, clock, config, passwords } = deps
  const tenant = tenantScope()
  const account = await findOwnAccount(db, tenant, user.userId)
  if (!account) throw notAnAccount()
  const now = clock.now()
  const { maxAttempts, durationMinutes } = config.auth.lockout
  const lockedUntil = new Date(now.getTime() + durationMinutes * 60_000)
  const claimed = await claimLoginAttempt(db, account.email, now, maxAttempts, lockedUntil)
  if (!claimed) {
    await passwords.verifyNothing(currentPassword)
    throw wrongPassword()
  }
  if (claimed.wasLocked) throw accountLocked(claimed.account.locked_until ?? lockedUntil, now)
  const passwordHash = claimed.account.password_hash
  if (!(await passwords.verify(passwordHash, currentPassword))) throw wrongPassword()
  if (!(await settleLoginAttempt(db, account.id, now, maxAttempts, 'clear')))
    throw accountLocked(lockedUntil, now)
  return { account, tenant, now, passwordHash }
}

/**
 * The signed-in user's own account: what it is (GET /api/auth/me) and its password change. A user
 * a deployment's own authenticator signed in, without a row in the account table, gets 404.
 */
export class OwnAccount {
  readonly #deps: OwnAccountDeps

  constructor(deps: OwnAccountDeps) {
    this.#deps = deps
  }

  async me(user: UserPrincipal) {
    const account = await findOwnAccount(this.#deps.db, tenantScope(), user.userId)
    if (!account) throw notAnAccount()
    return account
  }

  /**
   * Verifies the current password as a login does: the attempt is claimed first and counted toward
   * the lockout until the password proves right, so a stolen session cannot guess the password
   * faster than a login could (wrong: 401 INVALID_CREDENTIALS; locked: 401 ACCOUNT_LOCKED). Then,
   * in one transaction: the new hash (only if the old one is still in place), the account's
   * outstanding reset links retired, every other session of the user ended on every instance (the
   * caller's stays), the event and the password-changed notice.
   */
  async changePassword(user: UserPrincipal, currentPassword: string, newPassword: string): Promise<void> {
    const { db, config, passwords } = this.#deps
    checkPasswordPolicy(config, newPassword)
    const {
      account,
      tenant,
      now,
      passwordHash: previousHash,
    } = await confirmCurrentPassword(this.#deps, user, currentPassword)
    const passwordHash = await passwords.hash(newPassword)
    await inTransaction(db, async (trx) => {
      const set = await this.#deps.newPasswords.set(trx, {
        account,
        passwordHash,
        now,
        replaces: { hash: previousHash, tenant },
        sessions: { keep: user.sessionId },
        retire: 'PASSWORD_RESET',
        event: 'password.changed',
      })
      // Another change (or a reset) since the verification: the password given is not current any more.
      if (!set) throw wrongPassword()
    })
  }
}
