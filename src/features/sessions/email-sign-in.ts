import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import {
  type AccountRow,
  accountLocked,
  claimLoginAttempt,
  type EmailProof,
  type EmailProofs,
  emailProofInvalid,
  findAccountByEmail,
  proofMethod,
  settleLoginAttempt,
} from '../accounts/index.ts'
import {
  type AuthenticatedUser,
  type PasskeyAssertion,
  type SecondFactorCheck,
  secondFactorOfSignIn,
} from './authentication.ts'
import type { SignInMethod } from './service.ts'

export interface EmailSignInsDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  proofs: EmailProofs
  /** The second factor of login (src/features/compose.ts binds the same check to both). */
  secondFactor: SecondFactorCheck
}

/**
 * Sign-in with a link or code mailed to the account's address. The request answers the same for a
 * known, an unknown and a deactivated address: its work happens after the answer (`send`), where
 * only an active account gets a proof. Verifying is a login: the attempt is claimed against the
 * account's lockout before the proof is checked (a wrong code counts as a failed sign-in), the
 * second factor is required as login requires it (src/features/sessions/authentication.ts), and the
 * proof is used only once everything passed, so a missing second factor does not spend it.
 */
export class EmailSignIns {
  readonly #deps: EmailSignInsDeps

  constructor(deps: EmailSignInsDeps) {
    this.#deps = deps
  }

  /**
   * After the answer: the proof to an active account's address; to any other address a notice that
   * no active account uses it, with an unusable proof stored all the same (no account of its own),
   * so every address costs the same statements, sealing and mail.
   */
  async send(email: string): Promise<void> {
    const { db, clock, proofs } = this.#deps
    const now = clock.now()
    await inTransaction(db, async (trx) => {
      const account = await findAccountByEmail(trx, email.trim())
      const usable = account?.active ? account : undefined
      await proofs.issue(
        trx,
        {
          purpose: 'EMAIL_SIGN_IN',
          email: usable?.email ?? email.trim(),
          accountId: usable?.id ?? null,
          organizationId: usable?.organization_id ?? null,
          ...(usable ? {} : { noticeInstead: 'email_sign_in_no_account' as const }),
        },
        now,
      )
    })
  }

  async verify(
    given: EmailProof,
    factors: { otpCode: string | undefined; passkey: PasskeyAssertion | undefined },
  ): Promise<Required<AuthenticatedUser>> {
    const { db, clock, config, proofs } = this.#deps
    const now = clock.now()
    const { maxAttempts, durationMinutes } = config.auth.lockout
    const lockedUntil = new Date(now.getTime() + durationMinutes * 60_000)
    // A link names its account once resolved; a code is tried against the address given.
    const linked = 'token' in given ? await proofs.check(db, 'EMAIL_SIGN_IN', given, now) : undefined
    const email = linked?.email ?? ('email' in given ? given.email.trim() : '')
    const claimed = await claimLoginAttempt(db, email, now, maxAttempts, lockedUntil)
    const account = claimed?.account
    try {
      if (claimed?.wasLocked) throw accountLocked(claimed.account.locked_until ?? lockedUntil, now)
      const proof = linked ?? (await proofs.check(db, 'EMAIL_SIGN_IN', given, now))
      if (!account || proof.account_id !== account.id) throw emailProofInvalid()
      const factor = await secondFactorOfSignIn(db, this.#deps.secondFactor, account, factors, {
        now,
        maxAttempts,
        lockedUntil,
      })
      if (!(await settleLoginAttempt(db, account.id, now, maxAttempts, 'clear')))
        throw accountLocked(lockedUntil, now)
      await inTransaction(db, (trx) => proofs.use(trx, proof, now))
      const method = proofMethod(given)
      const signInMethod: SignInMethod = factor ? `${method}+${factor}` : method
      return { userId: account.id, organizationId: account.organization_id, signInMethod }
    } catch (error) {
      if (error instanceof AppError && error.code !== 'OTP_REQUIRED')
        await this.#failed(account, email, error)
      throw error
    }
  }

  /** The refused sign-in's event, as a refused login records it (unknown addresses in the system chain). */
  async #failed(account: AccountRow | undefined, email: string, error: AppError): Promise<void> {
    const reason =
      error.code === 'ACCOUNT_LOCKED'
        ? 'locked'
        : error.code === 'INVALID_OTP'
          ? 'otp'
          : error.code.startsWith('PASSKEY_')
            ? 'passkey'
            : 'email_proof'
    await inTransaction(this.#deps.db, (trx) =>
      this.#deps.audit.record(trx, {
        type: reason === 'locked' ? 'sign_in.locked' : 'sign_in.failed',
        organizationId: account?.organization_id ?? null,
        actor: { type: 'system', id: null },
        subject: account ? { type: 'user', id: account.id } : null,
        data: account ? { reason } : { username: email.toLowerCase().slice(0, 320) },
      }),
    )
  }
}
