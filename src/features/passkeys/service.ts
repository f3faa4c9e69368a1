import { createHmac } from 'node:crypto'
import type * as WebAuthn from '@simplewebauthn/server'
import type {
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/server'
import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import { type Config, jwtSecrets } from '../../config.ts'
import { inTransaction, mapUniqueViolation } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import type { UserPrincipal } from '../../principal.ts'
import { deriveKey } from '../../security/secret-box.ts'
import { findAccount } from '../accounts/index.ts'
import type { PasskeyAssertion } from '../sessions/index.ts'
import {
  consumeAuthenticationChallenge,
  consumeRegistrationChallenge,
  credentialsOfUsername,
  deletePasskey,
  findPasskeyWithAccount,
  insertChallenge,
  insertPasskey,
  listPasskeys,
  type PasskeyRow,
  type PasskeyWithAccount,
  recordPasskeyUse,
  renamePasskey,
} from './repository.ts'

export interface PasskeyServiceDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
}

/** A passkey as its owner sees it. */
export interface PasskeyRecord {
  id: string
  name: string
  deviceType: 'singleDevice' | 'multiDevice'
  backedUp: boolean
  transports: string[]
  aaguid: string
  createdAt: string
  lastUsedAt: string | null
}

export const toPasskeyRecord = (row: PasskeyRow): PasskeyRecord => ({
  id: row.id,
  name: row.name,
  deviceType: row.device_type,
  backedUp: row.backed_up,
  transports: row.transports,
  aaguid: row.aaguid,
  createdAt: row.created_at.toISOString(),
  lastUsedAt: row.last_used_at?.toISOString() ?? null,
})

/**
 * The signature counter rule: a counter that moved must keep moving forward (one that goes back or
 * stays is a cloned authenticator, device-bound credentials being the ones that count); a passkey
 * that reports 0 and always has, as synced passkeys and some security keys do, is accepted. A
 * counter that once moved never goes back to 0.
 */
export function counterAcceptable(stored: number, presented: number): boolean {
  if (presented === 0) return stored === 0
  return presented > stored
}

const DECOY_BYTES = 32
const SUPPORTED_ALGORITHMS = [-8, -7, -257]
const DECOY_TRANSPORTS = ['hybrid', 'internal']

/** The WebAuthn user handle of an account: the 16 bytes of its UUID. */
const userHandleOf = (accountId: string) => new Uint8Array(Buffer.from(accountId.replaceAll('-', ''), 'hex'))

// @simplewebauthn/server and its X.509 and ASN.1 stack take about 6 MB of heap: loaded once, by
// the first ceremony, rather than at start-up by a service that may never see a passkey.
let webAuthn: Promise<typeof WebAuthn> | undefined
const loadWebAuthn = () => {
  webAuthn ??= import('@simplewebauthn/server')
  return webAuthn
}

const registrationFailed = (detail: string) => new AppError('PASSKEY_REGISTRATION_FAILED', detail)
const challengeInvalid = () =>
  new AppError('PASSKEY_CHALLENGE_INVALID', 'The challenge is unknown, used, expired or of another ceremony')
const passkeyInvalid = () => new AppError('PASSKEY_INVALID', 'The passkey assertion could not be verified')

/**
 * Passkeys (WebAuthn, through @simplewebauthn/server): registration by a signed-in user,
 * authentication on its own (usernameless or username-first) or as a password login's second
 * factor. Every ceremony's challenge is stored, used once, and expires after
 * `platform.auth.passkeys.challenge-ttl`; user verification is required and enforced here, and the
 * origin and RP ID are checked against `platform.auth.passkeys.*`.
 */
export class PasskeyService {
  readonly #deps: PasskeyServiceDeps
  readonly #decoyKey: Buffer

  constructor(deps: PasskeyServiceDeps) {
    this.#deps = deps
    this.#decoyKey = deriveKey(jwtSecrets(deps.config)[0] as Buffer, 'passkey-decoy-credentials')
  }

  get #rp() {
    return this.#deps.config.auth.passkeys
  }

  #expiry(now: Date): Date {
    return new Date(now.getTime() + this.#rp.challengeTtl * 1000)
  }

  async registrationOptions(user: UserPrincipal): Promise<PublicKeyCredentialCreationOptionsJSON> {
    const { db, clock } = this.#deps
    const account = await findAccount(db, user.userId)
    if (!account) throw new AppError('AUTHENTICATION_REQUIRED', 'The account no longer exists')
    const existing = await listPasskeys(db, user.userId)
    const options = await (await loadWebAuthn()).generateRegistrationOptions({
      rpName: this.#rp.rpName,
      rpID: this.#rp.rpId,
      userName: account.email,
      userDisplayName: account.email,
      userID: userHandleOf(account.id),
      timeout: this.#rp.challengeTtl * 1000,
      attestationType: 'none',
      excludeCredentials: existing.map((p) => ({ id: p.credential_id, transports: p.transports })),
      authenticatorSelection: {
        residentKey: 'required',
        requireResidentKey: true,
        userVerification: 'required',
      },
      // EdDSA, ES256, RS256: what authenticators offer today, the same whatever the runtime supports.
      supportedAlgorithmIDs: SUPPORTED_ALGORITHMS,
    })
    const now = clock.now()
    await insertChallenge(db, {
      ceremony: 'registration',
      challenge: options.challenge,
      sessionId: user.sessionId,
      accountId: user.userId,
      now,
      expiresAt: this.#expiry(now),
    })
    return options
  }

  /** Verifies the authenticator's attestation to the session's own challenge and keeps the passkey. */
  async register(
    user: UserPrincipal,
    response: RegistrationResponseJSON,
    name?: string,
  ): Promise<PasskeyRecord> {
    const { db, clock } = this.#deps
    const now = clock.now()
    const { verifyRegistrationResponse } = await loadWebAuthn()
    let verification: Awaited<ReturnType<typeof verifyRegistrationResponse>>
    try {
      verification = await verifyRegistrationResponse({
        response,
        // Used once, and only by the session that asked for it.
        expectedChallenge: (challenge) =>
          consumeRegistrationChallenge(db, {
            sessionId: user.sessionId,
            accountId: user.userId,
            challenge,
            now,
          }),
        expectedOrigin: this.#rp.origins,
        expectedRPID: this.#rp.rpId,
        requireUserVerification: true,
      })
    } catch (error) {
      throw registrationFailed(`The passkey could not be registered: ${(error as Error).message}`)
    }
    if (!verification.verified) throw registrationFailed('The passkey could not be registered')
    const info = verification.registrationInfo
    if (!info.userVerified) throw registrationFailed('The authenticator did not verify the user')
    return inTransaction(db, async (trx) => {
      const account = await findAccount(trx, user.userId)
      if (!account?.active) throw new AppError('AUTHENTICATION_REQUIRED', 'The account is not active')
      const row = await mapUniqueViolation(
        () =>
          insertPasskey(trx, {
            account_id: account.id,
            organization_id: account.organization_id,
            credential_id: info.credential.id,
            public_key: info.credential.publicKey,
            counter: info.credential.counter,
            transports: info.credential.transports ?? [],
            device_type: info.credentialDeviceType,
            backed_up: info.credentialBackedUp,
            aaguid: info.aaguid,
            name: name?.trim() || defaultName(now),
            created_at: now,
          }),
        () => new AppError('PASSKEY_EXISTS', 'This authenticator is registered already'),
        'passkeys_credential_id_key',
      )
      await securityEmail(trx, account, 'passkey_added', row.name, now)
      await this.#deps.audit.record(trx, passkeyEvent('passkey.added', account, row))
      return toPasskeyRecord(row)
    })
  }

  async list(user: UserPrincipal): Promise<PasskeyRecord[]> {
    return (await listPasskeys(this.#deps.db, user.userId)).map(toPasskeyRecord)
  }

  async rename(user: UserPrincipal, id: string, name: string): Promise<PasskeyRecord> {
    const row = await renamePasskey(this.#deps.db, user.userId, id, name.trim())
    if (!row) throw new AppError('NOT_FOUND', 'No such passkey')
    return toPasskeyRecord(row)
  }

  async remove(user: UserPrincipal, id: string): Promise<void> {
    const { db, clock } = this.#deps
    await inTransaction(db, async (trx) => {
      const row = await deletePasskey(trx, user.userId, id)
      if (!row) throw new AppError('NOT_FOUND', 'No such passkey')
      const account = await findAccount(trx, user.userId)
      if (account) {
        await securityEmail(trx, account, 'passkey_removed', row.name, clock.now())
        await this.#deps.audit.record(trx, passkeyEvent('passkey.removed', account, row))
      }
    })
  }

  /**
   * The options of a sign-in. Without a username any passkey of the RP may answer (usernameless,
   * conditional UI). With one, the account's passkeys are allowed; an unknown, unusable or
   * passkey-less username gets decoy credentials derived from it instead, after the same
   * statements, so the answer tells nobody whether the account exists or has passkeys.
   */
  async authenticationOptions(
    username?: string,
  ): Promise<{ challengeId: string; options: PublicKeyCredentialRequestOptionsJSON }> {
    const { db, clock } = this.#deps
    let accountId: string | null = null
    let allowCredentials: { id: string; transports: string[] }[] = []
    if (username !== undefined) {
      const { account, credentials } = await credentialsOfUsername(db, username)
      if (account?.usable && credentials.length > 0) {
        accountId = account.id
        allowCredentials = credentials
      } else {
        allowCredentials = [{ id: this.#decoyCredential(username), transports: DECOY_TRANSPORTS }]
      }
    }
    const options = await (await loadWebAuthn()).generateAuthenticationOptions({
      rpID: this.#rp.rpId,
      allowCredentials,
      userVerification: 'required',
      timeout: this.#rp.challengeTtl * 1000,
    })
    const now = clock.now()
    const challengeId = await insertChallenge(db, {
      ceremony: 'authentication',
      challenge: options.challenge,
      sessionId: null,
      accountId,
      now,
      expiresAt: this.#expiry(now),
    })
    return { challengeId, options }
  }

  #decoyCredential(username: string): string {
    return createHmac('sha256', this.#decoyKey)
      .update(username.trim().toLowerCase())
      .digest()
      .subarray(0, DECOY_BYTES)
      .toString('base64url')
  }

  /**
   * A sign-in with a passkey alone: the challenge is used, the assertion verified (user
   * verification included), the counter checked and moved on. A deactivated account is refused as
   * an unknown credential is; a locked one with ACCOUNT_LOCKED.
   */
  async authenticate(assertion: PasskeyAssertion): Promise<{ userId: string; organizationId: string }> {
    let known: PasskeyWithAccount | undefined
    try {
      const passkey = await this.#verify(assertion, undefined, (found) => {
        known = found
      })
      return { userId: passkey.account_id, organizationId: passkey.organization_id }
    } catch (error) {
      if (error instanceof AppError) await this.#failed(known, error.code)
      throw error
    }
  }

  /** A refused passkey sign-in: in the credential's organization, or the system chain when unknown. */
  async #failed(passkey: PasskeyWithAccount | undefined, code: string): Promise<void> {
    const { db, audit } = this.#deps
    await inTransaction(db, (trx) =>
      audit.record(trx, {
        type: code === 'ACCOUNT_LOCKED' ? 'sign_in.locked' : 'sign_in.failed',
        organizationId: passkey?.organization_id ?? null,
        actor: { type: 'system', id: null },
        subject: passkey ? { type: 'user', id: passkey.account_id } : null,
        data: { method: 'passkey', reason: code },
      }),
    )
  }

  /** A passkey as the second factor of a password login: it must be one of this account's. */
  async verifySecondFactor(accountId: string, assertion: PasskeyAssertion): Promise<void> {
    await this.#verify(assertion, accountId)
  }

  async #verify(
    assertion: PasskeyAssertion,
    accountId?: string,
    found: (passkey: PasskeyWithAccount) => void = () => {},
  ): Promise<PasskeyWithAccount> {
    const { db, clock } = this.#deps
    const now = clock.now()
    const challenge = await consumeAuthenticationChallenge(db, assertion.challengeId, now)
    if (!challenge) throw challengeInvalid()
    const passkey = await findPasskeyWithAccount(db, assertion.response.id)
    if (!passkey) throw passkeyInvalid()
    found(passkey)
    // Username-first: the challenge was given for that account; second factor: for this account.
    if (challenge.account_id !== null && challenge.account_id !== passkey.account_id) throw passkeyInvalid()
    if (accountId !== undefined && passkey.account_id !== accountId) throw passkeyInvalid()
    const userHandle = assertion.response.response.userHandle
    if (userHandle && userHandle !== Buffer.from(userHandleOf(passkey.account_id)).toString('base64url'))
      throw passkeyInvalid()
    const stored = Number(passkey.counter)
    const { verifyAuthenticationResponse } = await loadWebAuthn()
    let verification: Awaited<ReturnType<typeof verifyAuthenticationResponse>>
    try {
      verification = await verifyAuthenticationResponse({
        response: assertion.response,
        expectedChallenge: challenge.challenge,
        expectedOrigin: this.#rp.origins,
        expectedRPID: this.#rp.rpId,
        credential: {
          id: passkey.credential_id,
          publicKey: new Uint8Array(passkey.public_key),
          counter: stored,
          transports: passkey.transports as never,
        },
        requireUserVerification: true,
      })
    } catch {
      throw passkeyInvalid()
    }
    const info = verification.authenticationInfo
    if (!verification.verified || !info.userVerified) throw passkeyInvalid()
    if (!counterAcceptable(stored, info.newCounter)) throw passkeyInvalid()
    if (!passkey.active || passkey.deactivated_at)
      throw new AppError('INVALID_CREDENTIALS', 'The passkey or the account cannot be used')
    if (passkey.locked_until && passkey.locked_until > now) {
      throw new AppError(
        'ACCOUNT_LOCKED',
        'The account is temporarily locked after too many failed attempts',
        {
          headers: {
            'retry-after': String(
              Math.max(1, Math.ceil((passkey.locked_until.getTime() - now.getTime()) / 1000)),
            ),
          },
        },
      )
    }
    await recordPasskeyUse(db, {
      id: passkey.id,
      counter: info.newCounter,
      backedUp: info.credentialBackedUp,
      now,
    })
    return passkey
  }
}

/** Tells the account's owner, through the mail outbox in the caller's transaction. */
const securityEmail = (
  trx: Tx,
  account: { email: string; organization_id: string },
  template: 'passkey_added' | 'passkey_removed',
  name: string,
  now: Date,
) =>
  enqueueMail(
    trx,
    { template, to: account.email, data: { name }, organizationId: account.organization_id },
    now,
  )

const passkeyEvent = (
  type: 'passkey.added' | 'passkey.removed',
  account: { id: string; organization_id: string },
  passkey: PasskeyRow,
) => ({
  type,
  organizationId: account.organization_id,
  actor: { type: 'user' as const, id: account.id },
  subject: { type: 'passkey', id: passkey.id },
  data: { name: passkey.name, deviceType: passkey.device_type },
})

const defaultName = (now: Date) => `Passkey added ${now.toISOString().slice(0, 10)}`
