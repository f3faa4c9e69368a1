import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction, isUniqueViolation, mapUniqueViolation } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { PasswordHasher } from '../../security/passwords.ts'
import {
  type AccountRow,
  accountLocked,
  claimLoginAttempt,
  findAccount,
  findAccountByEmail,
  type SignUps,
  settleLoginAttempt,
} from '../accounts/index.ts'
import {
  type PasskeyAssertion,
  type SecondFactorCheck,
  type SignInMethod,
  secondFactorOfSignIn,
} from '../sessions/index.ts'
import type { FinishedFlow, FlowBinding, OidcFlow } from './flow.ts'
import {
  type FederationRegistry,
  formatRef,
  type ProviderKind,
  type ProviderRef,
  type SignInTarget,
  type VerifiedIdentity,
} from './providers.ts'
import {
  countSignInWays,
  deleteIdentity,
  type FederatedIdentityRow,
  findIdentity,
  findLiveSession,
  insertIdentity,
  listIdentities,
  touchIdentity,
} from './repository.ts'

/** How recent the session's sign-in must be to link an identity to it. */
export const REAUTHENTICATION_WINDOW_SECONDS = 300

export interface FederatedSignInsDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  registry: FederationRegistry
  flow: OidcFlow
  signUps: SignUps
  /** The second factor of login (src/features/compose.ts binds the same check to every sign-in). */
  secondFactor: SecondFactorCheck
}

/** What a callback came to: a signed-in user, a sign-in waiting for its second factor, or a link. */
export type CallbackOutcome =
  | {
      kind: 'signed_in'
      userId: string
      organizationId: string
      signInMethod: SignInMethod
      /** Through the organization's own SSO connection (not a deployment-wide provider). */
      organizationConnection: boolean
    }
  | { kind: 'second_factor'; handle: string }
  | { kind: 'linked'; identityId: string }

/** The provider kind organization SSO connections register (src/features/sso/sign-in.ts). */
export const CONNECTION_KIND = 'connection'

const notLinked = () =>
  new AppError(
    'IDENTITY_NOT_LINKED',
    'An account with this address exists: sign in to it another way, then link this identity from the account screen',
  )

/**
 * Sign-in and linking with identities from OpenID Connect providers, on the flow of
 * src/features/federation/flow.ts. A sign-in with a linked identity (issuer, subject) signs its
 * account in; an unlinked one is handed to its provider kind's `onIdentity`. The deployment-wide
 * providers' kind (`platform`, below) never links by email: an address that has an account is
 * refused (IDENTITY_NOT_LINKED) and the person links the identity while signed in; an address
 * with no account gets one only when the provider verified it and sign-up is enabled. The second
 * factor is asked as login asks it. Linking needs the flow to come back to the session that
 * started it, whose sign-in is at most five minutes old.
 */
export class FederatedSignIns {
  readonly #deps: FederatedSignInsDeps

  constructor(deps: FederatedSignInsDeps) {
    this.#deps = deps
  }

  /** The `platform` kind: deployment-wide providers from platform.auth.oidc.providers. */
  platformKind(): ProviderKind {
    const { config, signUps } = this.#deps
    return {
      resolve: async (id) => {
        const provider = config.auth.oidc.providers.find((each) => each.id === id)
        if (!provider) return null
        return { ...provider, organizationId: null, connectionId: null }
      },
      onIdentity: async (trx, identity) => {
        if (!identity.email || !identity.emailVerified) {
          throw new AppError(
            'OIDC_EMAIL_UNVERIFIED',
            'The identity provider did not verify this email address; nothing was signed in or created',
          )
        }
        if (await findAccountByEmail(trx, identity.email)) throw notLinked()
        if (!config.auth.signUp.enabled) {
          throw new AppError('SIGN_UP_DISABLED', 'No account has this address, and sign-up is not enabled')
        }
        const name = typeof identity.claims.name === 'string' ? identity.claims.name.trim() : ''
        const created = await signUps.provision(
          trx,
          { email: identity.email, organizationName: name || identity.email, method: 'oidc' },
          this.#deps.clock.now(),
        )
        return { accountId: created.userId, organizationId: created.organizationId, created: true }
      },
    }
  }

  /** Starts a flow; linking needs a session signed in to within the last five minutes. */
  async start(ref: ProviderRef, binding: FlowBinding) {
    if (binding.purpose === 'link') await this.#requireRecentSession(binding.accountId, binding.sessionId)
    return this.#deps.flow.start(ref, binding)
  }

  /** Finishes the flow the cookie names; `session` is the request's signed-in session, if any. */
  async callback(
    handle: string | undefined,
    query: string,
    session: { userId: string; sessionId: string } | null,
  ): Promise<CallbackOutcome> {
    const finished = await this.#deps.flow.finish(handle, query)
    if (finished.binding.purpose === 'link') return this.#link(finished, session)
    const target = await this.#signInTarget(finished.identity)
    const account = await findAccount(this.#deps.db, target.accountId)
    if (!account?.active) throw new AppError('ACCESS_DENIED', 'This account is not active')
    let factor: 'otp' | 'passkey' | null | false
    try {
      factor = await this.#deps.secondFactor(account, { otpCode: undefined, passkey: undefined })
    } catch (error) {
      if (error instanceof AppError && error.code === 'OTP_REQUIRED') {
        return {
          kind: 'second_factor',
          handle: await this.#deps.flow.holdForSecondFactor(finished.identity.ref, account.id),
        }
      }
      throw error
    }
    if (factor === false) throw new AppError('INVALID_OTP', 'The one-time password is not valid')
    return {
      kind: 'signed_in',
      userId: account.id,
      organizationId: account.organization_id,
      signInMethod: 'oidc',
      organizationConnection: finished.identity.ref.kind === CONNECTION_KIND,
    }
  }

  /**
   * Completes a provider sign-in held for the second factor: counted as a login attempt toward the
   * account's lockout, as email sign-in counts it. The hold is spent only when the factor passed.
   */
  async completeSecondFactor(
    handle: string | undefined,
    factors: { otpCode: string | undefined; passkey: PasskeyAssertion | undefined },
  ): Promise<{
    userId: string
    organizationId: string
    signInMethod: SignInMethod
    organizationConnection: boolean
  }> {
    const { db, clock, config, flow } = this.#deps
    const held = await flow.peekSecondFactor(handle)
    const now = clock.now()
    const { maxAttempts, durationMinutes } = config.auth.lockout
    const lockedUntil = new Date(now.getTime() + durationMinutes * 60_000)
    const heldAccount = await findAccount(db, held.accountId)
    if (!heldAccount?.active) throw new AppError('ACCESS_DENIED', 'This account is not active')
    const claimed = await claimLoginAttempt(db, heldAccount.email, now, maxAttempts, lockedUntil)
    if (!claimed || claimed.account.id !== heldAccount.id)
      throw new AppError('ACCESS_DENIED', 'This account is not active')
    if (claimed.wasLocked) throw accountLocked(claimed.account.locked_until ?? lockedUntil, now)
    const account: AccountRow = claimed.account
    const passed = await secondFactorOfSignIn(db, this.#deps.secondFactor, account, factors, {
      now,
      maxAttempts,
      lockedUntil,
    })
    if (!(await settleLoginAttempt(db, account.id, now, maxAttempts, 'clear')))
      throw accountLocked(lockedUntil, now)
    await flow.takeSecondFactor(handle)
    const signInMethod: SignInMethod = passed ? `oidc+${passed}` : 'oidc'
    return {
      userId: account.id,
      organizationId: account.organization_id,
      signInMethod,
      organizationConnection: held.ref.kind === CONNECTION_KIND,
    }
  }

  /** The identities linked to the signed-in user's account. */
  list(organizationId: string, accountId: string): Promise<FederatedIdentityRow[]> {
    return listIdentities(this.#deps.db, organizationId, accountId)
  }

  /**
   * Unlinks one identity; 409 LAST_SIGN_IN_METHOD when the account would have no way left to sign
   * in (a usable password, a passkey, another identity, or email sign-in where it is enabled). The
   * account row is locked first, so two parallel unlinks cannot both pass the count.
   */
  async unlink(organizationId: string, accountId: string, identityId: string): Promise<void> {
    const { db, audit, config } = this.#deps
    await inTransaction(db, async (trx) => {
      const ways = await countSignInWays(trx, accountId, PasswordHasher.UNUSABLE_PREFIX)
      const removed = await deleteIdentity(trx, organizationId, accountId, identityId)
      if (!removed) throw new AppError('NOT_FOUND', 'No such linked identity')
      const left =
        (ways.password ? 1 : 0) +
        ways.passkeys +
        ways.identities -
        1 +
        (config.auth.emailSignIn.enabled ? 1 : 0)
      if (left < 1) {
        throw new AppError(
          'LAST_SIGN_IN_METHOD',
          'This identity is the last way to sign in to the account: set a password or add a passkey first',
        )
      }
      await audit.record(trx, {
        type: 'identity.unlinked',
        organizationId,
        actor: { type: 'user', id: accountId },
        subject: { type: 'user', id: accountId },
        data: { identityId, provider: removed.provider_ref, issuer: removed.issuer },
      })
    })
  }

  async #requireRecentSession(accountId: string, sessionId: string): Promise<void> {
    const { db, clock } = this.#deps
    const session = await findLiveSession(db, accountId, sessionId, clock.now())
    if (
      !session ||
      clock.now().getTime() - session.created_at.getTime() > REAUTHENTICATION_WINDOW_SECONDS * 1000
    ) {
      throw new AppError(
        'REAUTHENTICATION_REQUIRED',
        'Linking an identity needs a sign-in within the last 5 minutes: sign in again, then link',
      )
    }
  }

  async #link(
    finished: FinishedFlow,
    session: { userId: string; sessionId: string } | null,
  ): Promise<CallbackOutcome> {
    const { db, clock, audit } = this.#deps
    const binding = finished.binding as Extract<FlowBinding, { purpose: 'link' }>
    // The flow finishes only in the session that started it, and only while that session is live.
    if (!session || session.sessionId !== binding.sessionId || session.userId !== binding.accountId) {
      throw new AppError(
        'ACCESS_DENIED',
        'This link was started in another session: sign in and start it again',
      )
    }
    const now = clock.now()
    const account = await findAccount(db, binding.accountId)
    if (!account?.active || !(await findLiveSession(db, binding.accountId, binding.sessionId, now))) {
      throw new AppError(
        'ACCESS_DENIED',
        'This link was started in another session: sign in and start it again',
      )
    }
    const { identity } = finished
    const alreadyLinked = () =>
      new AppError('IDENTITY_ALREADY_LINKED', 'This identity is linked to another account')
    const row = await mapUniqueViolation(
      () =>
        inTransaction(db, async (trx) => {
          const { row: linked, inserted } = await this.#insert(
            trx,
            identity,
            account.id,
            account.organization_id,
            now,
          )
          if (linked.account_id !== account.id) throw alreadyLinked()
          if (inserted) {
            await audit.record(trx, {
              type: 'identity.linked',
              organizationId: account.organization_id,
              actor: { type: 'user', id: account.id },
              subject: { type: 'user', id: account.id },
              data: { identityId: linked.id, provider: formatRef(identity.ref), issuer: identity.issuer },
            })
          }
          return linked
        }),
      alreadyLinked,
      'federated_identities_issuer_subject_key',
    )
    return { kind: 'linked', identityId: row.id }
  }

  /** The account a sign-in is for: the linked identity's, or what the provider kind decides. */
  async #signInTarget(identity: VerifiedIdentity): Promise<SignInTarget> {
    const { db, clock, registry, signUps } = this.#deps
    const now = clock.now()
    const existing = await findIdentity(db, identity.issuer, identity.subject)
    if (existing) {
      sameOrganization(identity, existing.organization_id)
      await touchIdentity(db, existing.id, now)
      return { accountId: existing.account_id, organizationId: existing.organization_id, created: false }
    }
    const kind = registry.kind(identity.ref)
    const target = await this.#afterParallelFirstSignIn(identity, () =>
      inTransaction(db, async (trx) => {
        const decided = await kind.onIdentity(trx, identity)
        const { row: linked } = await this.#insert(
          trx,
          identity,
          decided.accountId,
          decided.organizationId,
          now,
        )
        // Two parallel first sign-ins: the identity the other one committed wins.
        if (linked.account_id !== decided.accountId)
          throw new AppError('SERVICE_UNAVAILABLE', 'Retry the sign-in')
        return decided
      }),
    )
    if (target.created) await signUps.deliverTuples()
    return target
  }

  /**
   * A first sign-in whose account or identity a parallel one committed meanwhile (a unique index
   * refused ours): the identity that won signs in; an address taken without it is IDENTITY_NOT_LINKED.
   */
  async #afterParallelFirstSignIn(
    identity: VerifiedIdentity,
    work: () => Promise<SignInTarget>,
  ): Promise<SignInTarget> {
    try {
      return await work()
    } catch (error) {
      if (!isUniqueViolation(error)) throw error
      const won = await findIdentity(this.#deps.db, identity.issuer, identity.subject)
      if (!won) throw notLinked()
      sameOrganization(identity, won.organization_id)
      return { accountId: won.account_id, organizationId: won.organization_id, created: false }
    }
  }

  #insert(trx: Tx, identity: VerifiedIdentity, accountId: string, organizationId: string, now: Date) {
    return insertIdentity(trx, {
      organization_id: organizationId,
      account_id: accountId,
      issuer: identity.issuer,
      subject: identity.subject,
      provider_ref: formatRef(identity.ref),
      connection_id: identity.provider.connectionId,
      email: identity.email,
      created_at: now,
    })
  }
}

/**
 * An organization's connection signs in to that organization only, whatever account the identity
 * is linked to (two organizations may connect to one issuer): 403 SSO_ACCOUNT_IN_OTHER_ORGANIZATION.
 */
function sameOrganization(identity: VerifiedIdentity, accountOrganizationId: string): void {
  const { organizationId } = identity.provider
  if (organizationId !== null && accountOrganizationId !== organizationId) {
    throw new AppError(
      'SSO_ACCOUNT_IN_OTHER_ORGANIZATION',
      "This identity belongs to an account of another organization; this organization's connection cannot sign it in",
    )
  }
}
