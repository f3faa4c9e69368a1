import { randomInt, timingSafeEqual } from 'node:crypto'
import type { Config } from '../../config.ts'
import type { EmailProofPurpose, Executor, Tx } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail, type SealedMailData } from '../../mail/outbox.ts'
import { newOpaqueToken, sha256 } from '../../security/tokens.ts'
import {
  claimCodeAttempt,
  type EmailProofRow,
  findLiveProofByToken,
  insertEmailProof,
  refundCodeAttempt,
  retireEmailProofs,
  useEmailProof,
} from './email-proof-repository.ts'

/** What a verify endpoint was given: the link's token, or the address and the mailed code. */
export type EmailProof = { token: string } | { email: string; code: string }

/** The console page each purpose's link opens; the page posts the token to the verify endpoint. */
export const EMAIL_PROOF_PAGES: Record<EmailProofPurpose, string> = {
  SIGN_UP: '/verify-sign-up',
  EMAIL_SIGN_IN: '/email-sign-in',
  EMAIL_CHANGE: '/verify-email',
}

const TEMPLATES = {
  SIGN_UP: 'sign_up_verification',
  EMAIL_SIGN_IN: 'email_sign_in',
  EMAIL_CHANGE: 'email_change_verification',
} as const

/** The notices a request mails to an address that cannot use the proof it asked for. */
export type ProofNotice = 'sign_up_account_exists' | 'email_sign_in_no_account'

export const emailProofInvalid = () =>
  new AppError('EMAIL_PROOF_INVALID', 'The link or code is invalid, expired or already used')

/** A six-digit code, leading zeros kept. */
export const newCode = () => String(randomInt(0, 1_000_000)).padStart(6, '0')

/** The code's hash, salted with its proof's token hash so equal codes of two proofs differ at rest. */
export const codeHash = (tokenHash: string, code: string) => sha256(`${tokenHash}:${code}`)

/** Whether a given code is the one whose hash is stored, compared in constant time. */
export function codeMatches(storedHash: string, tokenHash: string, code: string): boolean {
  const expected = Buffer.from(storedHash, 'hex')
  const actual = Buffer.from(codeHash(tokenHash, code.trim()), 'hex')
  return expected.length === actual.length && timingSafeEqual(expected, actual)
}

export interface EmailProofsDeps {
  config: Config
  /** Seals the link and code for the mail outbox, so neither is ever at rest readable. */
  sealMail: (data: Record<string, unknown>) => SealedMailData
}

/**
 * Mailed proofs of an address: a link to the console (its query `token=`) and a six-digit code,
 * either of which proves the address once. Both are stored hashed; a new proof of a purpose for an
 * address retires the older one; `platform.auth.email-proof.max-attempts` wrong codes end it (the
 * next attempt fails even with the right code); it lasts `platform.auth.email-proof.ttl`. Opening
 * the link (GET) consumes nothing: only the verify endpoint the console page posts to uses it.
 */
export class EmailProofs {
  readonly #deps: EmailProofsDeps

  constructor(deps: EmailProofsDeps) {
    this.#deps = deps
  }

  get #maxAttempts(): number {
    return this.#deps.config.auth.emailProof.maxAttempts
  }

  /** Stores a new proof and queues its mail, in the caller's transaction. */
  async issue(
    trx: Tx,
    proof: {
      purpose: EmailProofPurpose
      email: string
      accountId: string | null
      organizationId: string | null
      data?: Record<string, unknown>
      /**
       * The notice mailed in place of the proof, to an address that cannot use it (a sign-up for an
       * address that has an account, an email sign-in for one without an active account). The proof
       * is stored all the same, unusable (its purpose's verify refuses it: no pending sign-up in its
       * data, no account of its own), so every address costs the same statements, sealing and mail.
       */
      noticeInstead?: ProofNotice
    },
    now: Date,
  ): Promise<void> {
    const { config } = this.#deps
    const ttl = config.auth.emailProof.ttl
    await retireEmailProofs(trx, proof.purpose, proof.email, proof.accountId, now)
    const token = newOpaqueToken()
    const code = newCode()
    await insertEmailProof(trx, {
      purpose: proof.purpose,
      email: proof.email,
      accountId: proof.accountId,
      tokenHash: token.hash,
      codeHash: codeHash(token.hash, code),
      data: proof.data ?? {},
      now,
      expiresAt: new Date(now.getTime() + ttl * 1000),
    })
    const link = new URL(EMAIL_PROOF_PAGES[proof.purpose], config.web.frontendUrl)
    link.searchParams.set('token', token.raw)
    const minutes = Math.ceil(ttl / 60)
    await enqueueMail(
      trx,
      proof.noticeInstead
        ? {
            template: proof.noticeInstead,
            to: proof.email,
            data: this.#deps.sealMail({}),
            organizationId: proof.organizationId,
          }
        : {
            template: TEMPLATES[proof.purpose],
            to: proof.email,
            data: this.#deps.sealMail({ link: link.toString(), code, minutes }),
            organizationId: proof.organizationId,
          },
      now,
    )
  }

  /** Retires the live proofs of a purpose for an address (one proved another way meanwhile). */
  retire(trx: Tx, purpose: EmailProofPurpose, email: string, now: Date): Promise<void> {
    return retireEmailProofs(trx, purpose, email, null, now)
  }

  /**
   * The live proof the caller gave, not yet used: by its link's token, or by the address and code.
   * A code attempt is counted before the code is compared and given back when the code is right;
   * a wrong code stays counted. 400 EMAIL_PROOF_INVALID for anything else.
   */
  async check(
    db: Executor,
    purpose: EmailProofPurpose,
    given: EmailProof,
    now: Date,
  ): Promise<EmailProofRow> {
    if ('token' in given) {
      const row = await findLiveProofByToken(db, purpose, sha256(given.token), now, this.#maxAttempts)
      if (!row) throw emailProofInvalid()
      return row
    }
    const row = await claimCodeAttempt(db, purpose, given.email.trim(), now, this.#maxAttempts)
    if (!row) throw emailProofInvalid()
    if (!codeMatches(row.code_hash, row.token_hash, given.code)) throw emailProofInvalid()
    await refundCodeAttempt(db, row.id)
    return row
  }

  /** Uses a checked proof in the caller's transaction; 400 EMAIL_PROOF_INVALID if another use came first. */
  async use(trx: Tx, row: EmailProofRow, now: Date): Promise<void> {
    if (!(await useEmailProof(trx, row.id, now, this.#maxAttempts))) throw emailProofInvalid()
  }
}
