import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { TupleRecorder } from '../../authz/tuples.ts'
import type { Clock } from '../../clock.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { PasswordHasher } from '../../security/passwords.ts'
import type { SecretBox } from '../../security/secret-box.ts'
import {
  findAccountByEmail,
  insertAccountUnlessEmailTaken,
  normalizeEmail,
  roleTuple,
} from '../accounts/index.ts'
import type { ProviderKind, ResolvedProvider, SignInTarget, VerifiedIdentity } from '../federation/index.ts'
import { domainOfEmail } from './domains.ts'
import {
  findConnectionById,
  findEnabledConnection,
  isDomainVerifiedFor,
  linkedAccount,
  verifiedDomainOwner,
} from './repository.ts'

/** The provider kind of organization connections: flows name them `connection:<id>`. */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export interface ConnectionSignInsDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  box: SecretBox
  tuples: TupleRecorder
}

/**
 * Sign-in through an organization's connection. `route` sends an address to the connection of the
 * organization that verified its domain (identity first); it looks at the domain only, never at
 * whether an account has the address, so its answer says nothing about users. `kind` is what the
 * OpenID Connect flow asks about a connection: the provider behind it (enabled ones only), and the
 * account an identity it has not seen before signs in to, always in the connection's organization:
 *
 * - the address must be at a domain that organization verified (403 SSO_DOMAIN_NOT_VERIFIED);
 * - no account has it: one is provisioned just in time, role `member`, no password. Two parallel
 *   first sign-ins insert one account: the second waits on the unique address, then finds the
 *   account and the identity the first linked;
 * - an account of that organization has it: linked only when the provider says the address is
 *   verified (403 OIDC_EMAIL_UNVERIFIED otherwise);
 * - an account of another organization has it: 403 SSO_ACCOUNT_IN_OTHER_ORGANIZATION, nothing is
 *   linked or created.
 */
export class ConnectionSignIns {
  readonly #deps: ConnectionSignInsDeps

  constructor(deps: ConnectionSignInsDeps) {
    this.#deps = deps
  }

  /** The connection for the address, or null when its domain has none (unverified, or none enabled). */
  async route(email: string): Promise<string | null> {
    const { db } = this.#deps
    const domain = domainOfEmail(email)
    const owner = domain ? await verifiedDomainOwner(db, domain) : undefined
    if (!owner) return null
    return (await findEnabledConnection(db, owner))?.id ?? null
  }

  kind(): ProviderKind {
    return {
      resolve: (id) => this.#resolve(id),
      onIdentity: (trx, identity) => this.#onIdentity(trx, identity),
    }
  }

  async #resolve(id: string): Promise<ResolvedProvider | null> {
    if (!UUID.test(id)) return null
    const row = await findConnectionById(this.#deps.db, id)
    if (!row?.enabled) return null
    return {
      issuer: row.issuer,
      clientId: row.client_id,
      clientSecret: this.#deps.box.open(row.client_secret),
      scopes: ['email', 'profile'],
      name: row.name || 'Single sign-on',
      organizationId: row.organization_id,
      connectionId: row.id,
      emailVerifiedClaim: 'email_verified',
    }
  }

  async #onIdentity(trx: Tx, identity: VerifiedIdentity): Promise<SignInTarget> {
    const organizationId = identity.provider.organizationId
    if (!organizationId) throw new AppError('NOT_FOUND', 'No such identity provider')
    const domain = identity.email ? domainOfEmail(identity.email) : null
    if (!identity.email || !domain || !(await isDomainVerifiedFor(trx, organizationId, domain))) {
      throw new AppError(
        'SSO_DOMAIN_NOT_VERIFIED',
        "The identity provider's address is not at a domain this organization has verified",
      )
    }
    const email = normalizeEmail(identity.email)
    let account = await findAccountByEmail(trx, email)
    let linkedMeanwhile = false
    if (!account) {
      const created = await insertAccountUnlessEmailTaken(trx, {
        organizationId,
        email,
        passwordHash: PasswordHasher.unusableHash(),
        role: 'member',
        active: true,
      })
      if (created) return this.#provisioned(trx, identity, created.id, organizationId)
      // A parallel first sign-in created it meanwhile (and committed), with this identity linked.
      account = await findAccountByEmail(trx, email)
      if (!account) throw new AppError('SERVICE_UNAVAILABLE', 'Retry the sign-in')
      linkedMeanwhile = (await linkedAccount(trx, identity.issuer, identity.subject)) === account.id
    }
    if (account.organization_id !== organizationId) {
      throw new AppError(
        'SSO_ACCOUNT_IN_OTHER_ORGANIZATION',
        "An account of another organization has this address; this organization's connection cannot sign it in",
      )
    }
    if (!linkedMeanwhile && !identity.emailVerified) {
      throw new AppError(
        'OIDC_EMAIL_UNVERIFIED',
        'The identity provider did not verify this email address; the existing account was not linked',
      )
    }
    return { accountId: account.id, organizationId, created: false }
  }

  async #provisioned(
    trx: Tx,
    identity: VerifiedIdentity,
    accountId: string,
    organizationId: string,
  ): Promise<SignInTarget> {
    const { audit, tuples, clock } = this.#deps
    await tuples.record(
      trx,
      [roleTuple('write', { id: accountId, role: 'member', organization_id: organizationId })],
      clock.now(),
    )
    await audit.record(trx, {
      type: 'sso.user_provisioned',
      organizationId,
      actor: { type: 'system', id: null },
      subject: { type: 'user', id: accountId },
      data: { connectionId: identity.provider.connectionId, issuer: identity.issuer },
    })
    return { accountId, organizationId, created: true }
  }
}
