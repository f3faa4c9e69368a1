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
import { codeMatches, type EmailProof } from './email-proofs.ts'
import type { NewPasswords } from './new-password.ts'
import {
  claimOneTimeCodeAttempt,
  consumeOneTimeToken,
  findOneTimeToken,
  type OneTimeTokenRow,
  refundOneTimeCodeAttempt,
} from './one-time-tokens.ts'
import { findAccount, findAccountByEmail } from './repository.ts'

/**
 * Extension point: password reset. `request` must behave identically whether or not
 * the account exists; `confirm` sets the new password for a valid single-use proof: the mailed
 * link's token, or the address and the code the same mail carried.
 */
export interface PasswordResetHandler {
  request(email: string): Promise<void>
  confirm(proof: EmailProof, newPassword: string): Promise<void>
}

export interface PasswordResetsDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  links: AccountLinks
  newPasswords: NewPasswords
}

const invalidToken = () =>
  new AppError('INVALID_TOKEN', 'The link or code is invalid, expired or already used')

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
   * Sets a new password with a single-use token of either purpose, invitation or reset, given by its
   * link or by the address and code: activates an invited account, clears the lockout, revokes every
   * session, and queues the password-changed notice.
   */
  async confirm(given: EmailProof, newPassword: string): Promise<void> {
    const { db, clock, config, passwords } = this.#deps
    checkPasswordPolicy(config, newPassword)
    const now = clock.now()
    // A made-up token or a wrong code is refused before any password is hashed; the token is used
    // atomically below.
    const token = await this.#check(given, now)
    const passwordHash = await passwords.hash(newPassword)
    await inTransaction(db, async (trx) => {
      const used = await consumeOneTimeToken(trx, token.id, now, this.#maxAttempts)
      if (!used) throw invalidToken()
      const account = await findAccount(trx, used.account_id)
      if (!account) throw invalidToken()
      // No link brings back a deactivated account; an invitation activates an invited one.
      if (account.deactivated_at || (used.purpose === 'PASSWORD_RESET' && !account.active))
        throw invalidToken()
      await this.#deps.newPasswords.set(trx, {
        account,
        passwordHash,
        now,
        replaces: 'any',
        sessions: 'none',
        retire: 'all',
        event: used.purpose === 'INVITATION' ? 'invitation.accepted' : 'password.reset',
      })
    })
  }

  get #maxAttempts(): number {
    return this.#deps.config.auth.emailProof.maxAttempts
  }

  /**
   * The live token the caller gave: by its link, or by the address and the code, whose attempt is
   * claimed before the comparison (one statement whether or not the address has an account) and
   * given back when the code is right.
   */
  async #check(given: EmailProof, now: Date): Promise<OneTimeTokenRow> {
    const { db } = this.#deps
    if ('token' in given) {
      const row = await findOneTimeToken(db, sha256(given.token))
      if (!row || row.used_at || row.expires_at <= now || row.attempts >= this.#maxAttempts)
        throw invalidToken()
      return row
    }
    // The code lasts `platform.auth.email-proof.ttl`, as every mailed code does; the link, its
    // purpose's lifetime.
    const codesIssuedAfter = new Date(now.getTime() - this.#deps.config.auth.emailProof.ttl * 1000)
    const row = await claimOneTimeCodeAttempt(
      db,
      given.email.trim(),
      now,
      codesIssuedAfter,
      this.#maxAttempts,
    )
    if (!row?.code_hash || !codeMatches(row.code_hash, row.token_hash, given.code)) throw invalidToken()
    await refundOneTimeCodeAttempt(db, row.id)
    return row
  }
}
