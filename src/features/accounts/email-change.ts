import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction, mapUniqueViolation } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import type { UserPrincipal } from '../../principal.ts'
import type { PasswordHasher } from '../../security/passwords.ts'
import { type EndOtherSessions, normalizeEmail } from './accounts.ts'
import { retireAccountEmailProofs } from './email-proof-repository.ts'
import type { EmailProof, EmailProofs } from './email-proofs.ts'
import { emailProofInvalid } from './email-proofs.ts'
import { retireOneTimeTokens } from './one-time-tokens.ts'
import { confirmCurrentPassword, notAnAccount } from './own-account.ts'
import { findAccountByEmail, findOwnAccount, setAccountEmail } from './repository.ts'

export interface EmailChangesDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  proofs: EmailProofs
  endOtherSessions: EndOtherSessions
}

/** A change the current password allowed, to be mailed after the answer. */
export interface PendingEmailChange {
  accountId: string
  organizationId: string
  currentEmail: string
  newEmail: string
}

/**
 * The signed-in user's address change. The request checks the current password as a sign-in does
 * (counted toward the lockout); then, after the answer, the new address gets a proof and the
 * current one a notice, or, when the new address already has an account, the new address gets a
 * notice instead and nothing else happens: the answer is the same either way, so the request says
 * nothing of who has an account. Verifying (signed in as the same account) moves the account to
 * the proved address, ends its other sessions and links, records `email.changed` and tells the
 * former address.
 */
export class EmailChanges {
  readonly #deps: EmailChangesDeps

  constructor(deps: EmailChangesDeps) {
    this.#deps = deps
  }

  async prepare(user: UserPrincipal, newEmail: string, currentPassword: string): Promise<PendingEmailChange> {
    const email = normalizeEmail(newEmail)
    const { account, tenant } = await confirmCurrentPassword(this.#deps, user, currentPassword)
    return {
      accountId: account.id,
      organizationId: tenant.organizationId,
      currentEmail: account.email,
      newEmail: email,
    }
  }

  async send(pending: PendingEmailChange): Promise<void> {
    const { db, clock, proofs } = this.#deps
    const now = clock.now()
    await inTransaction(db, async (trx) => {
      const taken = await findAccountByEmail(trx, pending.newEmail)
      if (taken) {
        await enqueueMail(
          trx,
          { template: 'email_change_address_taken', to: taken.email, data: {}, organizationId: null },
          now,
        )
        return
      }
      await proofs.issue(
        trx,
        {
          purpose: 'EMAIL_CHANGE',
          email: pending.newEmail,
          accountId: pending.accountId,
          organizationId: pending.organizationId,
        },
        now,
      )
      await enqueueMail(
        trx,
        {
          template: 'email_change_requested',
          to: pending.currentEmail,
          data: {},
          organizationId: pending.organizationId,
        },
        now,
      )
    })
  }

  /**
   * Moves the caller's account to the proved address. The proof must be one the caller's account
   * asked for (another's is EMAIL_PROOF_INVALID, as if unknown). An address taken since the request
   * is 409 ACCOUNT_EXISTS and changes nothing.
   */
  async verify(user: UserPrincipal, given: EmailProof): Promise<void> {
    const { db, clock, proofs, audit } = this.#deps
    const tenant: TenantScope = tenantScope()
    const now = clock.now()
    const proof = await proofs.check(db, 'EMAIL_CHANGE', given, now)
    if (proof.account_id !== user.userId) throw emailProofInvalid()
    const account = await findOwnAccount(db, tenant, user.userId)
    if (!account) throw notAnAccount()
    // An address taken between the read and the update (the unique email index): the same answer.
    await mapUniqueViolation(
      () =>
        inTransaction(db, async (trx) => {
          await proofs.use(trx, proof, now)
          if (await findAccountByEmail(trx, proof.email)) throw accountExists()
          if (!(await setAccountEmail(trx, tenant, account.id, proof.email, now))) throw emailProofInvalid()
          // Links mailed to the former address stop working, and so does every other session.
          await retireOneTimeTokens(trx, account.id, now)
          await retireAccountEmailProofs(trx, account.id, now)
          await this.#deps.endOtherSessions(trx, account.id, user.sessionId, now, 'email_changed')
          await audit.record(trx, {
            type: 'email.changed',
            organizationId: tenant.organizationId,
            actor: { type: 'user', id: account.id },
            subject: { type: 'user', id: account.id },
            data: { method: 'token' in given ? 'email_link' : 'email_code' },
          })
          await enqueueMail(
            trx,
            { template: 'email_changed', to: account.email, data: {}, organizationId: tenant.organizationId },
            now,
          )
        }),
      accountExists,
      'accounts_email_key',
    )
  }
}

const accountExists = () => new AppError('ACCOUNT_EXISTS', 'This address already has an account')
