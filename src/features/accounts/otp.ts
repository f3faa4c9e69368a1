import { createHmac, randomInt } from 'node:crypto'
import type { Kysely } from 'kysely'
import { Secret, TOTP } from 'otpauth'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import { type Config, jwtSecrets } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import { deriveKey, type SecretBox } from '../../security/secret-box.ts'
import {
  claimOtpStep,
  consumeBackupCode,
  replaceBackupCodes,
  setOtpEnabled,
  storeOtpSecret,
} from './otp-repository.ts'
import { type AccountRow, findAccount } from './repository.ts'

const PERIOD_SECONDS = 30
const DIGITS = 6
/** Codes one period early or late are accepted (clock drift); each step only once. */
const WINDOW = 1
const BACKUP_CODES = 10
/**
 * Crockford's base32 in lower case: 32 symbols (5 bits each), no i, l, o or u, so nothing reads as
 * another; on input o is read as 0 and i, l as 1, as Crockford specifies.
 */
const BACKUP_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'
const BACKUP_GROUPS = 5
const BACKUP_GROUP_LENGTH = 5
/** 25 symbols of 5 bits: 125 bits, beyond any guessing, online or offline. */
const BACKUP_LENGTH = BACKUP_GROUPS * BACKUP_GROUP_LENGTH
const BACKUP_CODE = new RegExp(`^[${BACKUP_ALPHABET}]{${BACKUP_LENGTH}}$`)

export interface OtpServiceDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  box: SecretBox
}

/** A backup code: 25 random base32 symbols (125 bits), shown as xxxxx-xxxxx-xxxxx-xxxxx-xxxxx. */
function newBackupCode(): string {
  const symbols = Array.from(
    { length: BACKUP_LENGTH },
    () => BACKUP_ALPHABET[randomInt(BACKUP_ALPHABET.length)],
  )
  return Array.from({ length: BACKUP_GROUPS }, (_, group) =>
    symbols.slice(group * BACKUP_GROUP_LENGTH, (group + 1) * BACKUP_GROUP_LENGTH).join(''),
  ).join('-')
}

/**
 * A code as typed, in its canonical form, or null when it cannot be a backup code: case, hyphens
 * and white space do not matter, and o, i, l stand for 0, 1, 1.
 */
function normalizeBackupCode(typed: string): string | null {
  const code = typed.toLowerCase().replace(/[\s-]/g, '').replace(/o/g, '0').replace(/[il]/g, '1')
  return BACKUP_CODE.test(code) ? code : null
}

/**
 * Backup codes are stored as HMAC-SHA256 under a key derived (HKDF) from the JWT secret, as the TOTP
 * secrets' sealing key is, under its own purpose label. Why a keyed hash rather than a salted slow
 * one: the codes carry 125 random bits, so slowing each guess adds nothing, while a server-side key
 * means a copy of the database alone cannot test a single guess. A keyed hash is also deterministic,
 * so a typed code is found through the (account_id, code_hash) index and consumed by one atomic
 * UPDATE, with no per-row comparison in application code that could leak timing; a salted hash
 * would need every unused row read and hashed at each login. The comparison the database makes is
 * on a MAC an attacker cannot compute, so its timing reveals nothing about a code.
 */
class BackupCodeHasher {
  readonly #keys: Buffer[]

  /** `masterSecrets`: the current JWT secret first, then the previous ones (rotation). */
  constructor(masterSecrets: readonly Buffer[]) {
    this.#keys = masterSecrets.map((master) => deriveKey(master, 'otp-backup-code-mac'))
  }

  /** The stored form of a normalised code, under the current key. */
  hash(normalizedCode: string): string {
    return this.candidates(normalizedCode)[0] as string
  }

  /** The forms the code may be stored in: under the current key and under each previous one. */
  candidates(normalizedCode: string): string[] {
    return this.#keys.map((key) => createHmac('sha256', key).update(normalizedCode, 'utf8').digest('hex'))
  }
}

/**
 * TOTP second factor (RFC 6238, SHA-1, 6 digits, 30 s) with one-time backup codes. Secrets are
 * sealed at rest; a code is accepted once (the last accepted time step is recorded atomically).
 */
export class OtpService {
  readonly #deps: OtpServiceDeps
  readonly #backupCodeHasher: BackupCodeHasher

  constructor(deps: OtpServiceDeps) {
    this.#deps = deps
    this.#backupCodeHasher = new BackupCodeHasher(jwtSecrets(deps.config))
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
    // Loaded on first use: only a TOTP setup draws a QR code.
    const { default: QRCode } = await import('qrcode')
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
        backupCodes.map((code) => this.#backupCodeHasher.hash(code.replaceAll('-', ''))),
        now,
      )
      await enqueueMail(
        trx,
        { template: 'otp_enabled', to: account.email, data: {}, organizationId: account.organization_id },
        now,
      )
      await this.#recorded(trx, account, 'two_factor.enabled')
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
      await this.#recorded(trx, account, 'two_factor.disabled')
    })
  }

  /** An event of the account's own second factor, the account acting on itself. */
  #recorded(trx: Tx, account: AccountRow, type: string): Promise<void> {
    return this.#deps.audit.record(trx, {
      type,
      organizationId: account.organization_id,
      actor: { type: 'user', id: account.id },
      subject: { type: 'user', id: account.id },
    })
  }

  /**
   * The login's second factor: true when OTP is off, or the code is a fresh TOTP
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
    if (backup === null) return false
    // One atomic UPDATE … WHERE used_at IS NULL: of parallel logins with one code, exactly one wins;
    // the code is spent and its event recorded together.
    return inTransaction(this.#deps.db, async (trx) => {
      const used = await consumeBackupCode(
        trx,
        account.id,
        this.#backupCodeHasher.candidates(backup),
        this.#deps.clock.now(),
      )
      if (used) await this.#recorded(trx, account, 'backup_code.used')
      return used
    })
  }
}
