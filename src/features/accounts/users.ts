import type { Kysely } from 'kysely'
import { type AuditActor, type AuditTrail, actorOf } from '../../audit/index.ts'
import type { TupleRecorder } from '../../authz/tuples.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { runWithTenant } from '../../context.ts'
import { type AlongWith, inTransaction, mapUniqueViolation } from '../../db/database.ts'
import { type Page, page, rowsToRead } from '../../db/paging.ts'
import type { Database, Role, Tx } from '../../db/schema.ts'
import { type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError } from '../../errors.ts'
import type { UserPrincipal } from '../../principal.ts'
import { PasswordHasher } from '../../security/passwords.ts'
import { publishRevocation } from '../../security/revocation.ts'
import { findOrganization } from '../organizations/index.ts'
import type { AccountLinks } from './account-links.ts'
import {
  checkPasswordPolicy,
  type EndUserSessions,
  type NewAccount,
  normalizeEmail,
  organizationAdmin,
  roleTuple,
} from './accounts.ts'
import { retireOneTimeTokens } from './one-time-tokens.ts'
import {
  type AccountRow,
  findAccount,
  findAccountByEmail,
  findUserItem,
  incrementSessionVersion,
  insertAccount,
  listUsers,
  lockAccountOfOrganization,
  lockActiveAdmins,
  setAccountActive,
  setAccountRole,
  type UserItemRow,
  type UserPageKey,
  type UserStatus,
  unlockAccountOfOrganization,
} from './repository.ts'

export interface UserAdministrationDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  tuples: TupleRecorder
  links: AccountLinks
  endSessions: EndUserSessions
}

/** 409 ACCOUNT_EXISTS for a violation of the unique email index (`lower(email)`, any letter case). */
const accountExists = <T>(work: () => Promise<T>): Promise<T> =>
  mapUniqueViolation(
    work,
    () => new AppError('ACCOUNT_EXISTS', 'An account with this email already exists'),
    'accounts_email_key',
  )

/** Whether the account holds its role tuple: from its creation (invited ones too) until deactivated. */
const holdsRoleTuple = (account: AccountRow) =>
  !account.deactivated_at && (account.active || PasswordHasher.isUnusable(account.password_hash))

/**
 * Account administration by an organization's admins: list, invite, change a role, unlock, resend
 * an invitation, deactivate, reactivate and the admin-triggered reset; and by operators (the CLI,
 * the demo seed): create, deactivate and unlock. The organization is the request's tenant. Who may
 * administer is decided by the caller's account row, read in the operation's transaction (active,
 * role `admin`, of the tenant's organization), never by the authorization server: role tuples are
 * written for the resources that use them, and a tuple that lags behind the account table (queued,
 * or an authorization server that is down) neither grants nor blocks administration. Every change is
 * one transaction, with its role tuple, email and audit event in it.
 */
export class UserAdministration {
  readonly #deps: UserAdministrationDeps

  constructor(deps: UserAdministrationDeps) {
    this.#deps = deps
  }

  /**
   * The decision, first in every operation's transaction: the caller's own account row must be
   * active, `admin` and of the tenant's organization (403 ACCESS_DENIED otherwise, before any
   * target is looked up, so a member learns nothing about which accounts exist). Returns the
   * organization the operation acts in.
   */
  async #authorize(trx: Tx, caller: UserPrincipal): Promise<TenantScope> {
    const tenant = tenantScope()
    await this.#admin(trx, caller, tenant)
    return tenant
  }

  /**
   * The caller's account row as the decision reads it. Operations that lock the organization's
   * admins read it again once they hold the locks: an admin deactivated or demoted by a transaction
   * that committed in between cannot finish the operation.
   */
  #admin(trx: Tx, caller: UserPrincipal, tenant: TenantScope): Promise<AccountRow> {
    return organizationAdmin(trx, caller.userId, tenant.organizationId)
  }

  /** A target account of the admin's organization; others are 404, as if they did not exist. */
  async #target(trx: Tx, tenant: TenantScope, userId: string): Promise<AccountRow> {
    const target = await lockAccountOfOrganization(trx, tenant, userId)
    if (!target) throw new AppError('NOT_FOUND', 'No such user')
    return target
  }

  /** A new account with its role tuple, in the caller's transaction; a taken email is 409 ACCOUNT_EXISTS. */
  async #insert(
    trx: Tx,
    values: { organizationId: string; email: string; passwordHash: string; role: Role; active: boolean },
  ): Promise<AccountRow> {
    if (!(await findOrganization(trx, values.organizationId)))
      throw new AppError('NOT_FOUND', 'No such organization')
    const account = await insertAccount(trx, values)
    await this.#deps.tuples.record(trx, [roleTuple('write', account)], this.#deps.clock.now())
    return account
  }

  /** Creates an active account with a password (operations CLI, demo seed). */
  async create(input: NewAccount): Promise<AccountRow> {
    const { db, config, passwords } = this.#deps
    const email = normalizeEmail(input.email)
    checkPasswordPolicy(config, input.password)
    const passwordHash = await passwords.hash(input.password)
    return accountExists(() =>
      inTransaction(db, (trx) => this.#insert(trx, { ...input, email, passwordHash, active: true })),
    )
  }

  /** `along` runs in the invitation's transaction with its result. */
  async invite(
    caller: UserPrincipal,
    input: { email: string; organizationId: string; role: Role },
    along?: AlongWith<{ userId: string }>,
  ): Promise<{ userId: string }> {
    const { db, clock, links } = this.#deps
    const email = normalizeEmail(input.email)
    return accountExists(() =>
      inTransaction(db, async (trx) => {
        const tenant = await this.#authorize(trx, caller)
        if (input.organizationId !== tenant.organizationId) {
          throw new AppError('ACCESS_DENIED', 'Admins invite users to their own organization only')
        }
        // An unusable random hash: no password works until the invitee sets one through the link.
        const account = await this.#insert(trx, {
          organizationId: tenant.organizationId,
          email,
          passwordHash: PasswordHasher.unusableHash(),
          role: input.role,
          active: false,
        })
        await links.send(trx, account, 'INVITATION', clock.now())
        await this.#deps.audit.record(trx, {
          type: 'user.invited',
          organizationId: tenant.organizationId,
          actor: actorOf(caller),
          subject: { type: 'user', id: account.id },
          data: { role: input.role },
        })
        const result = { userId: account.id }
        await along?.(trx, result)
        return result
      }),
    )
  }

  async deactivate(caller: UserPrincipal, userId: string): Promise<{ userId: string; active: boolean }> {
    const { db } = this.#deps
    return inTransaction(db, async (trx) => {
      // A member is refused before anything is locked or revealed.
      const tenant = await this.#authorize(trx, caller)
      return this.#deactivate(trx, tenant, userId, actorOf(caller), () =>
        this.#admin(trx, caller, tenant).then(() => {}),
      )
    })
  }

  /**
   * Deactivation by an operator (`npm run cli -- user deactivate`): the same change as an admin's,
   * in the account's own organization, the last active admin kept.
   */
  async deactivateByOperator(
    userId: string,
  ): Promise<{ userId: string; organizationId: string; active: boolean }> {
    const { db } = this.#deps
    return inTransaction(db, async (trx) => {
      const account = await findAccount(trx, userId)
      if (!account) throw new AppError('NOT_FOUND', 'No such user')
      // The operator acts in the account's own organization.
      const tenant = runWithTenant(account.organization_id, tenantScope)
      const result = await this.#deactivate(trx, tenant, userId, actorOf(null), async () => {})
      return { ...result, organizationId: account.organization_id }
    })
  }

  /**
   * Deactivates an account of the organization: its sessions end (on every instance), its links
   * die, its session version moves on and its role tuple goes. `confirmCaller` re-checks who asks,
   * once the admins are locked.
   */
  async #deactivate(
    trx: Tx,
    tenant: TenantScope,
    userId: string,
    actor: AuditActor,
    confirmCaller: () => Promise<void>,
  ): Promise<{ userId: string; active: boolean }> {
    const { clock, tuples } = this.#deps
    const now = clock.now()
    // Lock the organization's active admins first, so two admins deactivating each other are
    // serialised: the second sees the first change and gets LAST_ADMIN.
    const admins = await lockActiveAdmins(trx, tenant)
    const target = await this.#target(trx, tenant, userId)
    if (target.active && target.role === 'admin' && admins <= 1) {
      throw new AppError('LAST_ADMIN', "The organization's last active admin cannot be deactivated")
    }
    await confirmCaller()
    if (target.deactivated_at) return { userId, active: false }
    // An invited account (inactive, not yet deactivated) is deactivated too: its invitation must
    // not bring it back. Every outstanding link dies with it and its role tuple goes.
    await setAccountActive(trx, tenant, userId, { active: false, deactivatedAt: now }, now)
    await retireOneTimeTokens(trx, userId, now)
    await this.#deps.endSessions(trx, userId, now, 'deactivated')
    await incrementSessionVersion(trx, userId)
    await tuples.record(trx, [roleTuple('delete', target)], now)
    await this.#deps.audit.record(trx, {
      type: 'user.deactivated',
      organizationId: tenant.organizationId,
      actor,
      subject: { type: 'user', id: userId },
      data: { role: target.role },
    })
    return { userId, active: false }
  }

  async reactivate(caller: UserPrincipal, userId: string): Promise<{ userId: string; active: boolean }> {
    const { db, clock, tuples } = this.#deps
    const now = clock.now()
    return inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const target = await this.#target(trx, tenant, userId)
      if (!target.deactivated_at) return { userId, active: target.active }
      // An invitee who never set a password goes back to invited: active once it accepts a fresh
      // invitation (admin reset sends one).
      const active = !PasswordHasher.isUnusable(target.password_hash)
      await setAccountActive(trx, tenant, userId, { active, deactivatedAt: null }, now)
      await tuples.record(trx, [roleTuple('write', target)], now)
      await this.#deps.audit.record(trx, {
        type: 'user.reactivated',
        organizationId: tenant.organizationId,
        actor: actorOf(caller),
        subject: { type: 'user', id: userId },
        data: { role: target.role, active },
      })
      return { userId, active }
    })
  }

  /**
   * Admin-triggered reset (POST /api/users/{id}/reset-password): mails the user a reset link. For
   * an invited account that has not set a password yet it sends a fresh invitation instead (the
   * way to resend one); a deactivated account gets nothing, since a reset would not bring it back.
   */
  async adminReset(caller: UserPrincipal, userId: string): Promise<void> {
    const { db, clock, links } = this.#deps
    await inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const target = await this.#target(trx, tenant, userId)
      if (target.active) return links.send(trx, target, 'PASSWORD_RESET', clock.now())
      if (!target.deactivated_at && PasswordHasher.isUnusable(target.password_hash))
        return links.send(trx, target, 'INVITATION', clock.now())
    })
  }

  /**
   * A page of the organization's accounts, by lower-cased email, after `after` (the `next` of the
   * page before), of one status or all.
   */
  async list(
    caller: UserPrincipal,
    options: { limit: number; status?: UserStatus | undefined; after?: UserPageKey | undefined },
  ): Promise<Page<UserItemRow, UserPageKey>> {
    const { db, clock } = this.#deps
    const rows = await inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      return listUsers(trx, tenant, { ...options, now: clock.now(), limit: rowsToRead(options.limit) })
    })
    return page(rows, options.limit, (last) => ({ lowerEmail: last.sort_key }))
  }

  /**
   * Gives an account of the organization another role: its role tuple is swapped (an account that
   * holds one), its session version moves on and its cached session state is dropped on every
   * instance, so no token or cache carries the old role past the commit. The last active admin is
   * never demoted. The same role again changes nothing and records nothing.
   */
  async changeRole(caller: UserPrincipal, userId: string, role: Role): Promise<UserItemRow> {
    const { db, clock, tuples } = this.#deps
    const now = clock.now()
    const { item, changed } = await inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      // Then the admins, as deactivation locks them: two admins demoting each other are serialised.
      const admins = await lockActiveAdmins(trx, tenant)
      const target = await this.#target(trx, tenant, userId)
      await this.#admin(trx, caller, tenant)
      if (target.role !== role) {
        if (target.active && target.role === 'admin' && admins <= 1) {
          throw new AppError('LAST_ADMIN', "The organization's last active admin cannot be demoted")
        }
        await setAccountRole(trx, tenant, userId, role, now)
        if (holdsRoleTuple(target)) {
          await tuples.record(
            trx,
            [roleTuple('delete', target), roleTuple('write', { ...target, role })],
            now,
          )
        }
        await incrementSessionVersion(trx, userId)
        await publishRevocation(trx, { kind: 'user', id: userId })
        await this.#deps.audit.record(trx, {
          type: 'user.role_changed',
          organizationId: tenant.organizationId,
          actor: actorOf(caller),
          subject: { type: 'user', id: userId },
          data: { from: target.role, to: role },
        })
      }
      return { item: await this.#item(trx, tenant, userId, now), changed: target.role !== role }
    })
    // The new tuples start on their way at once; what fails stays queued for the worker.
    if (changed) await tuples.deliver()
    return item
  }

  /**
   * Ends an account's lockout before its time (POST /api/users/{id}/unlock). An account that is
   * not locked is left as it is, its failure count included, and nothing is recorded.
   */
  async unlock(caller: UserPrincipal, userId: string): Promise<UserItemRow> {
    const { db, clock } = this.#deps
    const now = clock.now()
    return inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const target = await this.#target(trx, tenant, userId)
      await this.#unlock(trx, tenant, target, actorOf(caller), now, 'leave')
      return this.#item(trx, tenant, userId, now)
    })
  }

  /**
   * The unlock by an operator (`npm run cli -- user unlock --email E`): an admin's unlock, in the
   * account's own organization, by the system. An account that is not locked gets its failure
   * count cleared all the same, and nothing is recorded. Any letter case of the email finds it.
   */
  async unlockByOperator(email: string): Promise<{ userId: string }> {
    const { db, clock } = this.#deps
    const now = clock.now()
    return inTransaction(db, async (trx) => {
      const account = await findAccountByEmail(trx, email.trim())
      if (!account) throw new AppError('NOT_FOUND', 'No account with this email')
      // The operator acts in the account's own organization.
      const tenant = runWithTenant(account.organization_id, tenantScope)
      const target = await this.#target(trx, tenant, account.id)
      await this.#unlock(trx, tenant, target, actorOf(null), now, 'clear')
      return { userId: target.id }
    })
  }

  /**
   * Ends the target's lock (and its failure count) when one is in force at `now`, and records
   * `user.unlocked` by `actor` with when the lock would have ended. An account that is not locked
   * has nothing recorded; its failure count (and a lock that has passed) is cleared when
   * `notLocked` is 'clear', left as it is when 'leave'.
   */
  async #unlock(
    trx: Tx,
    tenant: TenantScope,
    target: AccountRow,
    actor: AuditActor,
    now: Date,
    notLocked: 'leave' | 'clear',
  ): Promise<void> {
    if (target.locked_until && target.locked_until > now) {
      await unlockAccountOfOrganization(trx, tenant, target.id, now)
      await this.#deps.audit.record(trx, {
        type: 'user.unlocked',
        organizationId: tenant.organizationId,
        actor,
        subject: { type: 'user', id: target.id },
        data: { lockedUntil: target.locked_until.toISOString() },
      })
    } else if (notLocked === 'clear') {
      await unlockAccountOfOrganization(trx, tenant, target.id, now)
    }
  }

  /**
   * Mails an invitee that has not accepted yet a fresh invitation; the older links stop working
   * (AccountLinks keeps one live link per purpose). Any other account: 409 INVALID_TRANSITION.
   */
  async resendInvitation(caller: UserPrincipal, userId: string): Promise<{ userId: string }> {
    const { db, clock, links } = this.#deps
    const now = clock.now()
    await inTransaction(db, async (trx) => {
      const tenant = await this.#authorize(trx, caller)
      const target = await this.#target(trx, tenant, userId)
      if (target.active || target.deactivated_at || !PasswordHasher.isUnusable(target.password_hash)) {
        throw new AppError(
          'INVALID_TRANSITION',
          'Only an invited user who has not accepted yet is invited again',
        )
      }
      await links.send(trx, target, 'INVITATION', now)
      await this.#deps.audit.record(trx, {
        type: 'user.invitation_resent',
        organizationId: tenant.organizationId,
        actor: actorOf(caller),
        subject: { type: 'user', id: userId },
      })
    })
    return { userId }
  }

  /** The account as a UserItemRow after the change, read in the change's transaction. */
  async #item(trx: Tx, tenant: TenantScope, userId: string, now: Date): Promise<UserItemRow> {
    const item = await findUserItem(trx, tenant, userId, now)
    if (!item) throw new AppError('NOT_FOUND', 'No such user')
    return item
  }
}
