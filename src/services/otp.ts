import { randomInt } from 'node:crypto'
import type { Kysely } from 'kysely'
import { Secret, TOTP } from 'otpauth'
import QRCode from 'qrcode'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import { inTransaction } from '../db/database.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { enqueueMail } from '../mail/outbox.ts'
import { type AccountRow, findAccount } from '../repositories/accounts.ts'
import {
  claimOtpStep,
  consumeBackupCode,
  replaceBackupCodes,
  setOtpEnabled,
  storeOtpSecret,
} from '../repositories/otp.ts'
import type { SecretBox } from './secret-box.ts'
import { sha256 } from './tokens.ts'

const PERIOD_SECONDS = 30
const DIGITS = 6
/** Codes one period early or late are accepted (clock drift); each step only once. */
const WINDOW = 1
const BACKUP_CODES = 10
const BACKUP_ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789'

export interface OtpServiceDeps {
  db: Kysely<Database>
  clock: Clock
  config: Config
  box: SecretBox
}

/** A backup code: 10 characters from an unambiguous alphabet (≈ 49 bits), shown as xxxxx-xxxxx. */
function newBackupCode(): string {
  const chars = Array.from({ length: 10 }, () => BACKUP_ALPHABET[randomInt(BACKUP_ALPHABET.length)]).join('')
  return `${chars.slice(0, 5)}-${chars.slice(5)}`
}

const normalizeBackupCode = (code: string) => code.trim().toLowerCase().replace(/[\s-]/g, '')

/**
 * TOTP second factor (RFC 6238, SHA-1, 6 digits, 30 s) with one-time backup codes. Secrets are
 * sealed at rest; a code is accepted once (the last accepted time step is recorded atomically).
 */
export class OtpService {
  readonly #deps: OtpServiceDeps

  constructor(deps: OtpServiceDeps) {
    this.#deps = deps
  }

  async #account(userId: string): Promise<AccountRow> {
    const account = await findAccount(this.#deps.db, userId)
    if (!account)
      throw new AppError('NOT_FOUND', 'One-time passwords are only available for platform accounts')
    return account
  }

  #totp(account: AccountRow, base32: string): TOTP {
    return new TOTP({
      issuer: this.#deps.config.auth.otp.issuer,
      label: account.email,
      algorithm: 'SHA1',
      digits: DIGITS,
      period: PERIOD_SECONDS,
      secret: Secret.fromBase32(base32),
    })
  }

  /** The time step a code belongs to, or null when it is not valid now. */
  #validStep(account: AccountRow, code: string): number | null {
    if (!account.otp_secret || !/^\d{6}$/.test(code.trim())) return null
    const base32 = this.#deps.box.open(account.otp_secret)
    const timestamp = this.#deps.clock.now().getTime()
    const delta = this.#totp(account, base32).validate({ token: code.trim(), timestamp, window: WINDOW })
    if (delta === null) return null
    return Math.floor(timestamp / 1000 / PERIOD_SECONDS) + delta
  }

  async setup(userId: string): Promise<{ secret: string; otpauthUri: string; qrCodeSvg: string }> {
    const account = await this.#account(userId)
    if (account.otp_enabled)
      throw new AppError('OTP_ALREADY_ENABLED', 'One-time passwords are already enabled')
    const secret = new Secret({ size: 20 })
    await storeOtpSecret(
      this.#deps.db,
      account.id,
      this.#deps.box.seal(secret.base32),
      this.#deps.clock.now(),
    )
    const otpauthUri = this.#totp(account, secret.base32).toString()
    const qrCodeSvg = await QRCode.toString(otpauthUri, { type: 'svg', errorCorrectionLevel: 'M', margin: 1 })
    return { secret: secret.base32, otpauthUri, qrCodeSvg }
  }

  async enable(userId: string, code: string): Promise<{ backupCodes: string[] }> {
    const account = await this.#account(userId)
    if (account.otp_enabled)
      throw new AppError('OTP_ALREADY_ENABLED', 'One-time passwords are already enabled')
    if (!account.otp_secret) throw new AppError('OTP_NOT_SET_UP', 'Call /api/auth/otp/setup first')
    const step = this.#validStep(account, code)
    if (step === null || !(await claimOtpStep(this.#deps.db, account.id, step))) {
      throw new AppError('INVALID_OTP', 'The one-time password is not valid', { status: 400 })
    }
    const { db, clock } = this.#deps
    const now = clock.now()
    const backupCodes = Array.from({ length: BACKUP_CODES }, newBackupCode)
    await inTransaction(db, async (trx) => {
      await setOtpEnabled(trx, account.id, true, now)
      await replaceBackupCodes(
        trx,
        account.id,
        backupCodes.map((c) => sha256(normalizeBackupCode(c))),
        now,
      )
      await enqueueMail(
        trx,
        { template: 'otp_enabled', to: account.email, data: {}, organizationId: account.organization_id },
        now,
      )
    })
    return { backupCodes }
  }

  async disable(userId: string): Promise<void> {
    const account = await this.#account(userId)
    if (this.#deps.config.auth.otp.requiredForRoles.includes(account.role)) {
      throw new AppError(
        'OTP_REQUIRED_FOR_ROLE',
        `One-time passwords cannot be disabled for the role ${account.role}`,
      )
    }
    if (!account.otp_enabled) throw new AppError('OTP_NOT_SET_UP', 'One-time passwords are not enabled')
    const { db, clock } = this.#deps
    const now = clock.now()
    await inTransaction(db, async (trx) => {
      await setOtpEnabled(trx, account.id, false, now)
      await replaceBackupCodes(trx, account.id, [], now)
      await enqueueMail(
        trx,
        { template: 'otp_disabled', to: account.email, data: {}, organizationId: account.organization_id },
        now,
      )
    })
  }

  /**
   * The login's second factor (spec 5.1 rule 5): true when OTP is off, or the code is a fresh TOTP
   * code or an unused backup code; 401 OTP_REQUIRED when the code is missing; false otherwise.
   */
  async verifyAtLogin(account: AccountRow, otpCode: string | undefined): Promise<boolean> {
    // The authenticator's own row: no second read of the account on the login path.
    if (!account.otp_enabled) return true
    if (!otpCode || otpCode.trim() === '') {
      throw new AppError('OTP_REQUIRED', 'This account requires a one-time password')
    }
    const step = this.#validStep(account, otpCode)
    if (step !== null) return claimOtpStep(this.#deps.db, account.id, step)
    const backup = normalizeBackupCode(otpCode)
    if (backup.length !== 10) return false
    return consumeBackupCode(this.#deps.db, account.id, sha256(backup), this.#deps.clock.now())
  }
}
