import type { Kysely } from 'kysely'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import type { PasswordHasher } from '../../security/passwords.ts'
import { sha256 } from '../../security/tokens.ts'
import type { AccountLinks } from './account-links.ts'
import { checkPasswordPolicy } from './accounts.ts'
import type { NewPasswords } from './new-password.ts'
import { consumeOneTimeToken, findOneTimeToken } from './one-time-tokens.ts'
import { findAccount, findAccountByEmail } from './repository.ts'

/**
 * Extension point: password reset. `request` must behave identically whether or not
 * the account exists; `confirm` sets the new password for a valid single-use token.
 */
export interface PasswordResetHandler {
  request(email: string): Promise<void>
  confirm(token: string, newPassword: string): Promise<void>
}

export interface PasswordResetsDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  links: AccountLinks
  newPasswords: NewPasswords
}

const invalidToken = () => new AppError('INVALID_TOKEN', 'The link is invalid, expired or already used')

/** The built-in password reset on the account table. */
export class PasswordResets implements PasswordResetHandler {
  readonly #deps: PasswordResetsDeps

  constructor(deps: PasswordResetsDeps) {
    this.#deps = deps
  }

  /** Self-service reset request: mails a link to an active account; silently nothing otherwise. */
  async request(email: string): Promise<void> {
    const { db, clock, links } = this.#deps
    const account = await findAccountByEmail(db, email.trim())
    if (!account?.active) return
    await inTransaction(db, (trx) => links.send(trx, account, 'PASSWORD_RESET', clock.now()))
  }

  /**
   * Sets a new password with a single-use token of either purpose, invitation or reset: activates an
   * invited account, clears the lockout, revokes every session, and queues the password-changed notice.
   */
  async confirm(token: string, newPassword: string): Promise<void> {
    const { db, clock, config, passwords } = this.#deps
    checkPasswordPolicy(config, newPassword)
    const now = clock.now()
    // A made-up token is refused before any password is hashed; the token is used atomically below.
    const peek = await findOneTimeToken(db, sha256(token))
    if (!peek || peek.used_at || peek.expires_at <= now) throw invalidToken()
    const passwordHash = await passwords.hash(newPassword)
    await inTransaction(db, async (trx) => {
      const used = await consumeOneTimeToken(trx, sha256(token), now)
      if (!used) throw invalidToken()
      const account = await findAccount(trx, used.account_id)
      if (!account) throw invalidToken()
      // No link brings back a deactivated account; an invitation activates an invited one.
      if (account.deactivated_at || (used.purpose === 'PASSWORD_RESET' && !account.active))
        throw invalidToken()
      // Accepting an invitation is the account's activation, recorded as such.
      await this.#deps.newPasswords.set(trx, {
        account,
        passwordHash,
        now,
        replaces: 'any',
        sessions: 'none',
        retire: 'all',
        event: used.purpose === 'INVITATION' ? 'user.activated' : 'password.reset',
      })
    })
  }
}
