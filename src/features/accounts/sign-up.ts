import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { TupleRecorder } from '../../authz/tuples.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction, mapUniqueViolation } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { AppError, validationFailed } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import { PasswordHasher } from '../../security/passwords.ts'
import { insertOrganization } from '../organizations/index.ts'
import { checkPasswordPolicy, normalizeEmail, roleTuple } from './accounts.ts'
import { type EmailProof, type EmailProofs, emailProofInvalid } from './email-proofs.ts'
import { findAccountByEmail, insertAccount } from './repository.ts'

export const ORGANIZATION_NAME_MAX_VISIBLE = 100

export interface SignUpsDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  passwords: PasswordHasher
  tuples: TupleRecorder
  proofs: EmailProofs
}

/** A sign-up as checked and hashed while the request waits; sent to the address after the answer. */
export interface PendingSignUp {
  email: string
  passwordHash: string
  organizationName: string
}

/** How the address was proved: the link or the code. */
export type ProofMethod = 'email_link' | 'email_code'

export const proofMethod = (given: EmailProof): ProofMethod =>
  'token' in given ? 'email_link' : 'email_code'

/**
 * The organization name as kept: trimmed, 1 to 100 characters of which none is a control or a
 * format character (zero-width and direction marks would make two names look alike).
 */
export function organizationName(name: string): string {
  const trimmed = name.trim()
  const characters = [...trimmed]
  if (
    characters.length === 0 ||
    characters.length > ORGANIZATION_NAME_MAX_VISIBLE ||
    /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(trimmed)
  ) {
    throw validationFailed(
      'organizationName',
      `must be 1 to ${ORGANIZATION_NAME_MAX_VISIBLE} visible characters`,
      `The organization name must be 1 to ${ORGANIZATION_NAME_MAX_VISIBLE} visible characters`,
    )
  }
  return trimmed
}

/**
 * Self-service sign-up: nothing exists until the address is proved. The request stores the pending
 * sign-up (its password hash and organization name) in a mailed proof, never in an account; an
 * address that has an account gets a notice instead and nothing changes. Both answer the same,
 * after the same work in the request (the checks and one password hash): what differs happens
 * after the answer (`send`). Verifying creates the organization and its first active admin, its
 * role tuple and audit event in one transaction, unless the address has an account by then (an
 * invitation came first): then nothing is created and the owner is told.
 */
export class SignUps {
  readonly #deps: SignUpsDeps

  constructor(deps: SignUpsDeps) {
    this.#deps = deps
  }

  /** The request's part: the address, the password policy and the name checked, the password hashed. */
  async prepare(input: {
    email: string
    password: string
    organizationName: string
  }): Promise<PendingSignUp> {
    const email = normalizeEmail(input.email)
    const name = organizationName(input.organizationName)
    checkPasswordPolicy(this.#deps.config, input.password)
    return { email, organizationName: name, passwordHash: await this.#deps.passwords.hash(input.password) }
  }

  /**
   * After the answer: the proof to a new address, the notice to one that has an account. Both store
   * a proof and mail once, in the same statements (the notice's proof carries no pending sign-up, so
   * verifying it creates nothing).
   */
  async send(pending: PendingSignUp): Promise<void> {
    const { db, clock, proofs } = this.#deps
    const now = clock.now()
    await inTransaction(db, async (trx) => {
      const account = await findAccountByEmail(trx, pending.email)
      await proofs.issue(
        trx,
        {
          purpose: 'SIGN_UP',
          email: account?.email ?? pending.email,
          accountId: null,
          organizationId: null,
          ...(account
            ? { noticeInstead: 'sign_up_account_exists' as const }
            : { data: { passwordHash: pending.passwordHash, organizationName: pending.organizationName } }),
        },
        now,
      )
    })
  }

  /**
   * Proves the address and creates the organization with its first admin, active, in one
   * transaction with the role tuple (through the tuple outbox, delivered at once after the commit)
   * and the `account.signed_up` event. The caller signs the new admin in. An address that has an
   * account by now: the proof is used, nothing is created, the owner gets the notice, and the answer
   * is 409 ACCOUNT_EXISTS (the caller has just proved it holds the address).
   */
  async verify(given: EmailProof): Promise<{ userId: string; organizationId: string }> {
    const { db, clock, proofs, tuples } = this.#deps
    const now = clock.now()
    const proof = await proofs.check(db, 'SIGN_UP', given, now)
    const { passwordHash, organizationName: name } = proof.data as {
      passwordHash?: unknown
      organizationName?: unknown
    }
    if (typeof passwordHash !== 'string' || typeof name !== 'string') throw emailProofInvalid()
    const accountExists = () =>
      new AppError('ACCOUNT_EXISTS', 'This address already has an account: sign in instead')
    // An account for the address committed between the read and the insert (the unique email
    // index) is answered as one found by the read.
    const created = await mapUniqueViolation(
      () =>
        inTransaction(db, async (trx) => {
          await proofs.use(trx, proof, now)
          const existing = await findAccountByEmail(trx, proof.email)
          if (existing) {
            await enqueueMail(
              trx,
              { template: 'sign_up_account_exists', to: existing.email, data: {}, organizationId: null },
              now,
            )
            return null
          }
          return this.#create(
            trx,
            { email: proof.email, passwordHash, name, method: proofMethod(given) },
            now,
          )
        }),
      accountExists,
      'accounts_email_key',
    )
    if (!created) throw accountExists()
    // The admin's tuple starts on its way at once; what fails stays queued for the worker.
    await tuples.deliver()
    return created
  }

  /**
   * Sign-up for an address another party proved (an OpenID Connect provider's verified email),
   * in the caller's transaction: the organization and its first admin as a proved sign-up creates
   * them, with no usable password. A sign-up still waiting for its proof at that address is
   * retired, so the password someone chose there never comes into use. The caller checks that the
   * address has no account, and delivers the tuples (`deliverTuples`) after the commit.
   */
  async provision(
    trx: Tx,
    input: { email: string; organizationName: string; method: string },
    now: Date,
  ): Promise<{ userId: string; organizationId: string }> {
    const email = normalizeEmail(input.email)
    await this.#deps.proofs.retire(trx, 'SIGN_UP', email, now)
    const name = organizationName(input.organizationName)
    const passwordHash = PasswordHasher.unusableHash()
    return this.#create(trx, { email, passwordHash, name, method: input.method }, now)
  }

  /** Starts the new admins' role tuples on their way (what fails stays queued for the worker). */
  deliverTuples(): Promise<void> {
    return this.#deps.tuples.deliver()
  }

  async #create(
    trx: Tx,
    values: { email: string; passwordHash: string; name: string; method: string },
    now: Date,
  ): Promise<{ userId: string; organizationId: string }> {
    const organization = await insertOrganization(trx, { name: values.name })
    const account = await insertAccount(trx, {
      organizationId: organization.id,
      email: values.email,
      passwordHash: values.passwordHash,
      role: 'admin',
      active: true,
    })
    await this.#deps.tuples.record(trx, [roleTuple('write', account)], now)
    await this.#deps.audit.record(trx, {
      type: 'account.signed_up',
      organizationId: organization.id,
      actor: { type: 'user', id: account.id },
      subject: { type: 'user', id: account.id },
      data: { method: values.method, role: 'admin' },
    })
    return { userId: account.id, organizationId: organization.id }
  }
}
