import type { AuthenticationResponseJSON } from '@simplewebauthn/server'
import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import type { PasswordHasher } from '../../security/passwords.ts'
import {
  type AccountRow,
  accountLocked,
  claimLoginAttempt,
  settleLoginAttempt,
  updatePasswordHash,
} from '../accounts/index.ts'
import type { SignInMethod } from './service.ts'

/** A signed passkey assertion answering an authentication challenge (src/features/passkeys). */
export interface PasskeyAssertion {
  challengeId: string
  response: AuthenticationResponseJSON
}

export interface Credentials {
  username: string
  password: string
  otpCode?: string | undefined
  /** A passkey assertion in place of the OTP code. */
  passkey?: PasskeyAssertion | undefined
}

export interface AuthenticatedUser {
  userId: string
  organizationId: string
  /** The factors given; 'password' when absent. */
  signInMethod?: SignInMethod
}

/**
 * Extension point: turns credentials into a user, or null. It may throw an AppError
 * (ACCOUNT_LOCKED, OTP_REQUIRED, INVALID_OTP) for a more specific answer. A deployment with its
 * own user table supplies one through `buildApp(config, { authenticator })`.
 */
export interface CredentialAuthenticator {
  authenticate(credentials: Credentials): Promise<AuthenticatedUser | null>
}

/**
 * Second-factor check used by the built-in authenticator (bound in src/features/compose.ts): the
 * TOTP code, or a passkey assertion. Resolves to the factor that passed, null when none was needed,
 * false for a wrong code; throws for a refused assertion or OTP_REQUIRED.
 */
export type SecondFactorCheck = (
  account: AccountRow,
  given: { otpCode: string | undefined; passkey: PasskeyAssertion | undefined },
) => Promise<'otp' | 'passkey' | null | false>

/**
 * The second factor of a password login: a passkey of the account in place of the OTP code;
 * otherwise the code when OTP is on. Built from the passkeys and the TOTP services (bound in
 * src/features/compose.ts).
 */
export function passkeyOrOtp(factors: {
  passkeys: { verifySecondFactor(accountId: string, assertion: PasskeyAssertion): Promise<void> }
  otp: { verifyAtLogin(account: AccountRow, otpCode: string | undefined): Promise<boolean> }
}): SecondFactorCheck {
  return async (account, { otpCode, passkey }) => {
    if (passkey) {
      await factors.passkeys.verifySecondFactor(account.id, passkey)
      return 'passkey'
    }
    if (!account.otp_enabled) return null
    return (await factors.otp.verifyAtLogin(account, otpCode)) ? 'otp' : false
  }
}

/**
 * The second factor of a sign-in whose first factor passed (a mailed proof, an identity provider),
 * with a login attempt already claimed against the account's lockout: given back when no code was
 * tried (OTP_REQUIRED is rethrown), kept for a wrong code (INVALID_OTP). Resolves to the factor that
 * passed, or null when none was needed.
 */
export async function secondFactorOfSignIn(
  db: Kysely<Database>,
  check: SecondFactorCheck,
  account: AccountRow,
  factors: { otpCode: string | undefined; passkey: PasskeyAssertion | undefined },
  lockout: { now: Date; maxAttempts: number; lockedUntil: Date },
): Promise<'otp' | 'passkey' | null> {
  let passed: 'otp' | 'passkey' | null | false
  try {
    passed = await check(account, factors)
  } catch (error) {
    if (error instanceof AppError && error.code === 'OTP_REQUIRED') {
      if (!(await settleLoginAttempt(db, account.id, lockout.now, lockout.maxAttempts, 'refund')))
        throw accountLocked(lockout.lockedUntil, lockout.now)
    }
    throw error
  }
  if (passed === false) throw new AppError('INVALID_OTP', 'The one-time password is not valid')
  return passed
}

export interface AccountAuthenticatorDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  /** The second factor (the TOTP feature); without one, a right password is enough. */
  secondFactor?: SecondFactorCheck | undefined
}

/**
 * The built-in authenticator on the account table. Every attempt first claims a slot in one
 * statement (src/features/accounts/repository.ts `claimLoginAttempt`), counted as failed until the password
 * proves right, so parallel attempts can neither get more than the allowed verifications nor clear
 * a lock that a parallel failure set. Unknown, deactivated and wrong-password logins run the same
 * statements and one argon2 verification each, and get the same answer.
 */
export class AccountAuthenticator implements CredentialAuthenticator {
  readonly #deps: AccountAuthenticatorDeps

  constructor(deps: AccountAuthenticatorDeps) {
    this.#deps = deps
  }

  async authenticate(credentials: Credentials): Promise<AuthenticatedUser | null> {
    const { username } = credentials
    let account: AccountRow | undefined
    try {
      const outcome = await this.#attempt(credentials, (claimed) => {
        account = claimed
      })
      if (outcome === null) await this.#failed(account, username, 'password')
      return outcome
    } catch (error) {
      if (error instanceof AppError) {
        if (error.code === 'ACCOUNT_LOCKED') await this.#failed(account, username, 'locked')
        else if (error.code === 'INVALID_OTP') await this.#failed(account, username, 'otp')
        else if (error.code.startsWith('PASSKEY_')) await this.#failed(account, username, 'passkey')
      }
      throw error
    }
  }

  /**
   * The audit event of a refused sign-in, once the refusal is known (after the password check, which
   * never runs inside a transaction): in the account's organization, or in the system chain for
   * an unknown or deactivated account, so nothing an organization reads says whether an account
   * exists. Unknown and known accounts cost the same statements here too.
   */
  async #failed(
    account: AccountRow | undefined,
    username: string,
    reason: 'password' | 'otp' | 'passkey' | 'locked',
  ) {
    const { db, audit } = this.#deps
    await inTransaction(db, (trx) =>
      audit.record(trx, {
        type: reason === 'locked' ? 'sign_in.locked' : 'sign_in.failed',
        organizationId: account?.organization_id ?? null,
        actor: { type: 'system', id: null },
        subject: account ? { type: 'user', id: account.id } : null,
        data: account ? { reason } : { username: username.trim().toLowerCase().slice(0, 320) },
      }),
    )
  }

  async #attempt(
    { username, password, otpCode, passkey }: Credentials,
    claimedAccount: (account: AccountRow) => void,
  ): Promise<AuthenticatedUser | null> {
    const { db, clock, config, passwords } = this.#deps
    const now = clock.now()
    const { maxAttempts, durationMinutes } = config.auth.lockout
    const lockedUntil = new Date(now.getTime() + durationMinutes * 60_000)
    const claimed = await claimLoginAttempt(db, username.trim(), now, maxAttempts, lockedUntil)
    if (!claimed) {
      await passwords.verifyNothing(password)
      return null
    }
    claimedAccount(claimed.account)
    // A locked account gets no verification at all: its attempts cost no hash and reveal nothing.
    if (claimed.wasLocked) throw accountLocked(claimed.account.locked_until ?? lockedUntil, now)
    const { account } = claimed
    // A wrong password (or, below, a wrong code) stays counted as the claim counted it.
    if (!(await passwords.verify(account.password_hash, password))) return null
    let factor: 'otp' | 'passkey' | null = null
    if (this.#deps.secondFactor) {
      let passed: 'otp' | 'passkey' | null | false
      try {
        passed = await this.#deps.secondFactor(account, { otpCode, passkey })
      } catch (error) {
        // OTP_REQUIRED: the password was right and no code was tried, so the attempt is given back.
        if (error instanceof AppError && error.code === 'OTP_REQUIRED') {
          if (!(await settleLoginAttempt(db, account.id, now, maxAttempts, 'refund')))
            throw accountLocked(lockedUntil, now)
        }
        throw error
      }
      if (passed === false) throw new AppError('INVALID_OTP', 'The one-time password is not valid')
      factor = passed
    }
    // A burst past the limit locks the account for good: then even the right password is refused.
    if (!(await settleLoginAttempt(db, account.id, now, maxAttempts, 'clear')))
      throw accountLocked(lockedUntil, now)
    if (passwords.needsRehash(account.password_hash)) {
      await updatePasswordHash(db, account.id, await passwords.hash(password), now)
    }
    const signInMethod =
      factor === 'otp' ? 'password+otp' : factor === 'passkey' ? 'password+passkey' : 'password'
    return { userId: account.id, organizationId: account.organization_id, signInMethod }
  }
}
