import type { Tx } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'

/**
 * The seam between the OpenID Connect flow and what a provider is for.
 *
 * A flow is started for a provider reference, `<kind>:<id>`: `platform:google` names a
 * deployment-wide provider (platform.auth.oidc.providers), and another feature registers a kind of
 * its own (an organization's connection, `connection:<uuid>`) with `FederationRegistry.register`.
 * Every kind shares the one redirect URI, `<public-url>/api/auth/oidc/callback`: the flow records
 * the reference, and the callback asks the kind's `resolve` for the provider again and hands the
 * verified identity to the kind's `onIdentity`, which names the account to sign in (or refuses).
 * Linking an identity to a signed-in account, the second factor and the session are the flow's
 * own and the same for every kind.
 */
export interface ResolvedProvider {
  /** The issuer as configured; discovery must answer with exactly this `issuer`. */
  issuer: string
  clientId: string
  clientSecret: string
  /** Requested scopes; `openid` is always added. */
  scopes: string[]
  /** Shown on the sign-in page and in the linked identities. */
  name: string
  /** The organization a connection belongs to; null for a deployment-wide provider. */
  organizationId: string | null
  /** The connection's id, kept on the identities it creates; null for a deployment-wide provider. */
  connectionId: string | null
  /** Which claim says the email is verified: `email_verified`, or Microsoft Entra's `xms_edov`. */
  emailVerifiedClaim: EmailVerifiedClaim
}

export type EmailVerifiedClaim = 'email_verified' | 'xms_edov'

/** A provider's answer once every check passed: the ID token's claims, and where they came from. */
export interface VerifiedIdentity {
  ref: ProviderRef
  provider: ResolvedProvider
  /** The ID token's `iss`, which is the provider's issuer. */
  issuer: string
  subject: string
  email: string | null
  /** True only when the provider's verification claim says so (see `emailVerifiedClaim`). */
  emailVerified: boolean
  claims: Record<string, unknown>
}

/** What a kind decides for a sign-in: the account to sign in, found or created in `trx`. */
export interface SignInTarget {
  accountId: string
  organizationId: string
  /** True when the account was created by this sign-in. */
  created: boolean
}

export interface ProviderKind {
  /** The provider behind `id`, or null when there is none (or it is disabled). */
  resolve(id: string): Promise<ResolvedProvider | null>
  /**
   * A sign-in with an identity not linked to any account yet (a linked one signs its account in
   * without asking). Runs in the callback's transaction; throws an AppError to refuse.
   */
  onIdentity(trx: Tx, identity: VerifiedIdentity): Promise<SignInTarget>
}

export interface ProviderRef {
  kind: string
  id: string
}

export const formatRef = (ref: ProviderRef): string => `${ref.kind}:${ref.id}`

export function parseRef(text: string): ProviderRef | null {
  const at = text.indexOf(':')
  if (at <= 0 || at === text.length - 1) return null
  return { kind: text.slice(0, at), id: text.slice(at + 1) }
}

const unknownProvider = () => new AppError('NOT_FOUND', 'No such identity provider')

/** The provider kinds, by name. Built once in the composition root; each kind registers itself there. */
export class FederationRegistry {
  readonly #kinds = new Map<string, ProviderKind>()

  register(kind: string, handler: ProviderKind): void {
    if (!/^[a-z][a-z0-9-]*$/.test(kind)) throw new Error(`invalid provider kind: ${kind}`)
    if (this.#kinds.has(kind)) throw new Error(`provider kind registered twice: ${kind}`)
    this.#kinds.set(kind, handler)
  }

  kind(ref: ProviderRef): ProviderKind {
    const handler = this.#kinds.get(ref.kind)
    if (!handler) throw unknownProvider()
    return handler
  }

  /** The provider a reference names; 404 NOT_FOUND for an unknown kind or id. */
  async resolve(ref: ProviderRef): Promise<ResolvedProvider> {
    const provider = await this.kind(ref).resolve(ref.id)
    if (!provider) throw unknownProvider()
    return provider
  }
}
