import type { Kysely } from 'kysely'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { findAccount } from '../accounts/index.ts'
import type { SignInContext, SignInMethod } from '../sessions/index.ts'
import { domainOfEmail } from './domains.ts'
import { isDomainVerifiedFor } from './repository.ts'

/** The organization configuration key that keeps verified-domain members on the SSO connection. */
export const SSO_REQUIRED_KEY = 'security.sso-required'

/** The admins' way in when the identity provider is down or misconfigured: password and second factor. */
const BREAK_GLASS: ReadonlySet<SignInMethod> = new Set(['password+otp', 'password+passkey'])

export interface SsoRequirementDeps {
  db: Kysely<Database>
  /** The organization's configuration value (cached, pushed to every instance on change). */
  configValue: (organizationId: string, key: string) => Promise<string | undefined>
}

/**
 * `security.sso-required=true`: a member of the organization whose address is at a domain the
 * organization verified signs in through the organization's connection only. A password, an email
 * link or code, or a passkey alone answer 403 SSO_REQUIRED once the credentials were proved (so the
 * refusal reveals nothing an attempt without them could learn). The organization's admins keep a
 * break-glass way in: password together with a second factor (TOTP or a passkey). A sign-in through
 * the organization's own connection passes here (the connection's own checks decide it); one through
 * a deployment-wide provider ("Continue with …") is refused like a password.
 */
export function ssoRequirement(deps: SsoRequirementDeps) {
  return async (
    user: { userId: string; organizationId: string },
    method: SignInMethod,
    context: SignInContext,
  ): Promise<void> => {
    // The organization's own connection is the way SSO requires; a deployment-wide provider
    // ("Continue with …") is another way, refused like a password.
    if (context.organizationConnection) return
    if ((await deps.configValue(user.organizationId, SSO_REQUIRED_KEY)) !== 'true') return
    const account = await findAccount(deps.db, user.userId)
    const domain = account ? domainOfEmail(account.email) : null
    if (!account || !domain || !(await isDomainVerifiedFor(deps.db, user.organizationId, domain))) return
    if (account.role === 'admin' && BREAK_GLASS.has(method)) return
    throw new AppError(
      'SSO_REQUIRED',
      "This organization signs its members in through its identity provider: use 'Sign in with SSO'",
    )
  }
}
