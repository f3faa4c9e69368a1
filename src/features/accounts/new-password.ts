import type { AuditTrail } from '../../audit/index.ts'
import type { OneTimeTokenPurpose, Tx } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import type { EndOtherSessions, EndUserSessions } from './accounts.ts'
import { retireOneTimeTokens } from './one-time-tokens.ts'
import {
  type AccountRow,
  incrementSessionVersion,
  replacePasswordHash,
  setNewPassword,
} from './repository.ts'

export interface NewPasswordsDeps {
  audit: AuditTrail
  endSessions: EndUserSessions
  endOtherSessions: EndOtherSessions
}

/** A new password of an account, and how the path that sets it differs from the others. */
export interface NewPassword {
  account: Pick<AccountRow, 'id' | 'organization_id' | 'email'>
  /** Hashed by the caller before its transaction: a hash takes long, and must not hold locks. */
  passwordHash: string
  now: Date
  /**
   * Over which hash it is written. `{ hash, tenant }`, a change made with the current password:
   * only over `hash` (the one that password was verified against) of an account of `tenant` that is
   * still active; otherwise nothing is written or done and `set` answers false. The failure count
   * stays as the verification settled it. `'any'`, set with a link: over whatever the account holds;
   * the account becomes active (an accepted invitation) and its lockout ends.
   */
  replaces: { hash: string; tenant: TenantScope } | 'any'
  /**
   * Which of the account's sessions stay. `{ keep }`: that one (the session a change was made
   * from); every other ends. `'none'`: every session ends and the session version moves on, so no
   * access token issued before outlives the old password.
   */
  sessions: { keep: string } | 'none'
  /** Which of the account's outstanding one-time links stop working: those of one purpose, or all. */
  retire: OneTimeTokenPurpose | 'all'
  /** The event recorded, the account itself its actor (the signed-in user, or the link's holder). */
  event: 'password.changed' | 'password.reset' | 'invitation.accepted'
}

/**
 * The one way an account gets a new password (the signed-in user's change, a reset link, an
 * accepted invitation): in the caller's transaction, the hash, the account's outstanding links
 * retired, its sessions ended on every instance (the ending announces a revocation of the user),
 * the audit event and the password-changed notice.
 */
export class NewPasswords {
  readonly #deps: NewPasswordsDeps

  constructor(deps: NewPasswordsDeps) {
    this.#deps = deps
  }

  /** False only when `replaces` names a hash that is no longer in place: then nothing was done. */
  async set(trx: Tx, password: NewPassword): Promise<boolean> {
    const { account, passwordHash, now } = password
    if (password.replaces === 'any') {
      await setNewPassword(trx, account.id, passwordHash, now)
    } else {
      const { hash, tenant } = password.replaces
      if (!(await replacePasswordHash(trx, tenant, account.id, hash, passwordHash, now))) return false
    }
    await retireOneTimeTokens(trx, account.id, now, password.retire === 'all' ? undefined : password.retire)
    if (password.sessions === 'none') {
      await this.#deps.endSessions(trx, account.id, now, 'password_changed')
      await incrementSessionVersion(trx, account.id)
    } else {
      await this.#deps.endOtherSessions(trx, account.id, password.sessions.keep, now, 'password_changed')
    }
    await this.#deps.audit.record(trx, {
      type: password.event,
      organizationId: account.organization_id,
      actor: { type: 'user', id: account.id },
      subject: { type: 'user', id: account.id },
    })
    await enqueueMail(
      trx,
      { template: 'password_changed', to: account.email, data: {}, organizationId: account.organization_id },
      now,
    )
    return true
  }
}
