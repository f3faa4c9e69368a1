import type { Kysely } from 'kysely'
import type { TupleRecorder } from '../authz/tuples.ts'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import { inTransaction } from '../db/database.ts'
import type { Database, OneTimeTokenPurpose, Role, Tx } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { enqueueMail, type SealedMailData } from '../mail/outbox.ts'
import type { UserPrincipal } from '../principal.ts'
import {
  type AccountRow,
  findAccount,
  findAccountByEmail,
  incrementSessionVersion,
  insertAccount,
} from '../repositories/accounts.ts'
import {
  consumeOneTimeToken,
  findOneTimeToken,
  insertOneTimeToken,
  retireOneTimeTokens,
} from '../repositories/one-time-tokens.ts'
import { findOrganization } from '../repositories/organizations.ts'
import { countDevices, recordDevice } from '../repositories/otp.ts'
import { revokeSessions } from '../repositories/sessions.ts'
import { checkPasswordPolicy, normalizeEmail, roleTuple } from './accounts.ts'
import { PasswordHasher } from './passwords.ts'
import { newOpaqueToken, sha256 } from './tokens.ts'

/**
 * Extension point (spec 5.6): password reset. `request` must behave identically whether or not
 * the account exists; `confirm` sets the new password for a valid single-use token.
 */
export interface PasswordResetHandler {
  request(email: string): Promise<void>
  confirm(token: string, newPassword: string): Promise<void>
}

export interface AccountManagementDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  tuples: TupleRecorder
  /** Seals the link of a one-time token for the mail outbox, so no raw token is ever at rest. */
  sealMail: (data: Record<string, unknown>) => SealedMailData
}

const LINK_PATHS: Record<OneTimeTokenPurpose, { path: string; template: 'invitation' | 'password_reset' }> = {
  INVITATION: { path: '/accept-invitation', template: 'invitation' },
  PASSWORD_RESET: { path: '/reset-password', template: 'password_reset' },
}

const isUniqueViolation = (error: unknown) => (error as { code?: string })?.code === '23505'

/**
 * Invitations, deactivation, password reset and the new-device notice (spec 3.3, 4.1). Every state
 * change is one transaction; the emails it causes go to the mail outbox in that transaction.
 */
export class AccountManagement implements PasswordResetHandler {
  readonly #deps: AccountManagementDeps

  constructor(deps: AccountManagementDeps) {
    this.#deps = deps
  }

  #ttl(purpose: OneTimeTokenPurpose): number {
    const { auth } = this.#deps.config
    return purpose === 'INVITATION' ? auth.invitation.ttl : auth.passwordReset.ttl
  }

  /** Issues a single-use token and queues the email carrying its link, in the caller's transaction. */
  async #sendToken(
    trx: Tx,
    account: Pick<AccountRow, 'id' | 'email' | 'organization_id'>,
    purpose: OneTimeTokenPurpose,
    now: Date,
  ) {
    // A new link retires the older ones of its purpose: only the latest reset or invitation works.
    await retireOneTimeTokens(trx, account.id, now, purpose)
    const token = newOpaqueToken()
    await insertOneTimeToken(trx, {
      accountId: account.id,
      purpose,
      tokenHash: token.hash,
      now,
      expiresAt: new Date(now.getTime() + this.#ttl(purpose) * 1000),
    })
    const { path, template } = LINK_PATHS[purpose]
    const link = new URL(path, this.#deps.config.web.frontendUrl)
    link.searchParams.set('token', token.raw)
    await enqueueMail(
      trx,
      {
        template,
        to: account.email,
        data: this.#deps.sealMail({ link: link.toString() }),
        organizationId: account.organization_id,
      },
      now,
    )
  }

  /** The caller's own account, which must be an active admin (spec 5.5 rule 2). */
  async #admin(db: Kysely<Database> | Tx, caller: UserPrincipal): Promise<AccountRow> {
    const account = await findAccount(db, caller.userId)
    if (!account?.active || account.role !== 'admin' || account.organization_id !== caller.organizationId) {
      throw new AppError('ACCESS_DENIED', 'This operation needs an organization admin')
    }
    return account
  }

  /** A target account of the admin's organization; others are 404, as if they did not exist. */
  async #target(trx: Tx, organizationId: string, userId: string): Promise<AccountRow> {
    const target = await trx
      .selectFrom('accounts')
      .selectAll()
      .where('id', '=', userId)
      .forUpdate()
      .executeTakeFirst()
    if (!target || target.organization_id !== organizationId) throw new AppError('NOT_FOUND', 'No such user')
    return target
  }

  async invite(
    caller: UserPrincipal,
    input: { email: string; organizationId: string; role: Role },
  ): Promise<{ userId: string }> {
    const { db, clock } = this.#deps
    const admin = await this.#admin(db, caller)
    if (input.organizationId !== admin.organization_id) {
      throw new AppError('ACCESS_DENIED', 'Admins invite users to their own organization only')
    }
    const email = normalizeEmail(input.email)
    const now = clock.now()
    try {
      return await inTransaction(db, async (trx) => {
        if (!(await findOrganization(trx, admin.organization_id)))
          throw new AppError('NOT_FOUND', 'No such organization')
        // An unusable random hash: no password works until the invitee sets one through the link.
        const account = await insertAccount(trx, {
          organizationId: admin.organization_id,
          email,
          passwordHash: PasswordHasher.unusableHash(),
          role: input.role,
          active: false,
        })
        await this.#deps.tuples.record(trx, [roleTuple('write', account)], now)
        await this.#sendToken(trx, account, 'INVITATION', now)
        return { userId: account.id }
      })
    } catch (error) {
      if (isUniqueViolation(error))
        throw new AppError('ACCOUNT_EXISTS', 'An account with this email already exists')
      throw error
    }
  }

  async deactivate(caller: UserPrincipal, userId: string): Promise<{ userId: string; active: boolean }> {
    const { db, clock } = this.#deps
    const now = clock.now()
    // A member is refused before anything is locked or revealed.
    await this.#admin(db, caller)
    return inTransaction(db, async (trx) => {
      // Lock the organization's active admins first, so two admins deactivating each other are
      // serialised: the second sees the first change and gets LAST_ADMIN.
      const admins = await trx
        .selectFrom('accounts')
        .select('id')
        .where('organization_id', '=', caller.organizationId)
        .where('role', '=', 'admin')
        .where('active', '=', true)
        .orderBy('id')
        .forUpdate()
        .execute()
      const target = await this.#target(trx, caller.organizationId, userId)
      if (target.active && target.role === 'admin' && admins.length <= 1) {
        throw new AppError('LAST_ADMIN', "The organization's last active admin cannot be deactivated")
      }
      await this.#admin(trx, caller)
      if (target.deactivated_at) return { userId, active: false }
      // An invited account (inactive, not yet deactivated) is deactivated too: its invitation must
      // not bring it back. Every outstanding link dies with it and its role tuple goes.
      await trx
        .updateTable('accounts')
        .set({ active: false, deactivated_at: now, updated_at: now })
        .where('id', '=', userId)
        .execute()
      await retireOneTimeTokens(trx, userId, now)
      await revokeSessions(trx, { userId }, now, 'deactivated')
      await incrementSessionVersion(trx, userId)
      await this.#deps.tuples.record(trx, [roleTuple('delete', target)], now)
      return { userId, active: false }
    })
  }

  async reactivate(caller: UserPrincipal, userId: string): Promise<{ userId: string; active: boolean }> {
    const { db, clock } = this.#deps
    const now = clock.now()
    return inTransaction(db, async (trx) => {
      const admin = await this.#admin(trx, caller)
      const target = await this.#target(trx, admin.organization_id, userId)
      if (!target.deactivated_at) return { userId, active: target.active }
      // An invitee who never set a password goes back to invited: active once it accepts a fresh
      // invitation (admin reset sends one).
      const active = !PasswordHasher.isUnusable(target.password_hash)
      await trx
        .updateTable('accounts')
        .set({ active, deactivated_at: null, updated_at: now })
        .where('id', '=', userId)
        .execute()
      await this.#deps.tuples.record(trx, [roleTuple('write', target)], now)
      return { userId, active }
    })
  }

  /**
   * Admin-triggered reset (POST /api/users/{id}/reset-password): mails the user a reset link. For
   * an invited account that has not set a password yet it sends a fresh invitation instead (the
   * way to resend one); a deactivated account gets nothing, since a reset would not bring it back.
   */
  async adminReset(caller: UserPrincipal, userId: string): Promise<void> {
    const { db, clock } = this.#deps
    await inTransaction(db, async (trx) => {
      const admin = await this.#admin(trx, caller)
      const target = await this.#target(trx, admin.organization_id, userId)
      if (target.active) return this.#sendToken(trx, target, 'PASSWORD_RESET', clock.now())
      if (!target.deactivated_at && PasswordHasher.isUnusable(target.password_hash))
        return this.#sendToken(trx, target, 'INVITATION', clock.now())
    })
  }

  /** Self-service reset request: mails a link to an active account; silently nothing otherwise. */
  async request(email: string): Promise<void> {
    const { db, clock } = this.#deps
    const account = await findAccountByEmail(db, email.trim())
    if (!account?.active) return
    await inTransaction(db, (trx) => this.#sendToken(trx, account, 'PASSWORD_RESET', clock.now()))
  }

  /**
   * Sets a new password with a single-use token of either purpose (spec 4.1 rule 1): activates an
   * invited account, clears the lockout, revokes every session, and queues the password-changed notice.
   */
  async confirm(token: string, newPassword: string): Promise<void> {
    const { db, clock, config, passwords } = this.#deps
    checkPasswordPolicy(config, newPassword)
    const now = clock.now()
    // A made-up token is refused before any password is hashed; the token is used atomically below.
    const peek = await findOneTimeToken(db, sha256(token))
    if (!peek || peek.used_at || peek.expires_at <= now) {
      throw new AppError('INVALID_TOKEN', 'The link is invalid, expired or already used')
    }
    const passwordHash = await passwords.hash(newPassword)
    await inTransaction(db, async (trx) => {
      const used = await consumeOneTimeToken(trx, sha256(token), now)
      if (!used) throw new AppError('INVALID_TOKEN', 'The link is invalid, expired or already used')
      const account = await findAccount(trx, used.account_id)
      if (!account) throw new AppError('INVALID_TOKEN', 'The link is invalid, expired or already used')
      // No link brings back a deactivated account; an invitation activates an invited one.
      if (account.deactivated_at || (used.purpose === 'PASSWORD_RESET' && !account.active)) {
        throw new AppError('INVALID_TOKEN', 'The link is invalid, expired or already used')
      }
      await trx
        .updateTable('accounts')
        .set({
          password_hash: passwordHash,
          active: true,
          failed_attempts: 0,
          locked_until: null,
          updated_at: now,
        })
        .where('id', '=', account.id)
        .execute()
      await retireOneTimeTokens(trx, account.id, now)
      await revokeSessions(trx, { userId: account.id }, now, 'password_changed')
      await incrementSessionVersion(trx, account.id)
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

  /**
   * The new-device notice (spec 6 item 3) as an operation: queues the email. A device is the
   * SHA-256 of the User-Agent string as the browser sends it (same browser, same OS, same version
   * = same device); the IP address is not part of it.
   */
  async notifyNewDevice(
    accountId: string,
    client: { userAgent: string | null; ipAddress: string | null },
  ): Promise<void> {
    const { db, clock } = this.#deps
    const account = await findAccount(db, accountId)
    if (!account) return
    const now = clock.now()
    await inTransaction(db, (trx) =>
      enqueueMail(
        trx,
        {
          template: 'new_device_login',
          to: account.email,
          data: {
            userAgent: client.userAgent ?? 'unknown',
            ipAddress: client.ipAddress ?? 'unknown',
            at: now.toISOString(),
          },
          organizationId: account.organization_id,
        },
        now,
      ),
    )
  }

  /** With the opt-in setting, notifies a login from a device the account has not used before. */
  async onLogin(
    accountId: string,
    client: { userAgent: string | null; ipAddress: string | null },
  ): Promise<void> {
    if (!this.#deps.config.auth.newDeviceNotice.enabled) return
    const { db, clock } = this.#deps
    if (!(await findAccount(db, accountId))) return
    const seenBefore = await countDevices(db, accountId)
    const isNew = await recordDevice(db, accountId, sha256(client.userAgent ?? ''), clock.now())
    // The very first device of an account is not news.
    if (isNew && seenBefore > 0) await this.notifyNewDevice(accountId, client)
  }
}
