import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import type { PasswordHasher } from '../../security/passwords.ts'
import { sha256 } from '../../security/tokens.ts'
import type { AccountLinks } from './account-links.ts'
import { checkPasswordPolicy, type EndUserSessions } from './accounts.ts'
import { consumeOneTimeToken, findOneTimeToken, retireOneTimeTokens } from './one-time-tokens.ts'
import { findAccount, findAccountByEmail, incrementSessionVersion, setNewPassword } from './repository.ts'

/**
 * Extension point: password reset. `request` must behave identically whether or not
 * the account exists; `confirm` sets the new password for a valid single-use token.
 */
export interface PasswordResetHandler {
  request(email: string): Promise<void>
  confirm(token: string, newPassword: string): Promise<void>
}

export interface PasswordResetsDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  links: AccountLinks
  endSessions: EndUserSessions
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
      await setNewPassword(trx, account.id, passwordHash, now)
      await retireOneTimeTokens(trx, account.id, now)
      await this.#deps.endSessions(trx, account.id, now, 'password_changed')
      await incrementSessionVersion(trx, account.id)
      // The link's holder acts: accepting an invitation activates the account.
      await this.#deps.audit.record(trx, {
        type: used.purpose === 'INVITATION' ? 'user.activated' : 'password.reset',
        organizationId: account.organization_id,
        actor: { type: 'user', id: account.id },
        subject: { type: 'user', id: account.id },
      })
      await enqueueMail(
        trx,
        {
          template: 'password_changed',
          to: account.email,
          data: {},
          organizationId: account.organization_id,
        },
        now,
      )
    })
  }
}
