import type { Config } from '../../config.ts'
import type { OneTimeTokenPurpose, Tx } from '../../db/schema.ts'
import { enqueueMail, type SealedMailData } from '../../mail/outbox.ts'
import { newOpaqueToken } from '../../security/tokens.ts'
import { codeHash, newCode } from './email-proofs.ts'
import { insertOneTimeToken, retireOneTimeTokens } from './one-time-tokens.ts'
import type { AccountRow } from './repository.ts'

const LINK_PATHS: Record<OneTimeTokenPurpose, { path: string; template: 'invitation' | 'password_reset' }> = {
  INVITATION: { path: '/accept-invitation', template: 'invitation' },
  PASSWORD_RESET: { path: '/reset-password', template: 'password_reset' },
}

export interface AccountLinksDeps {
  config: Config
  /** Seals the link for the mail outbox, so no raw token is ever at rest. */
  sealMail: (data: Record<string, unknown>) => SealedMailData
}

/**
 * The single-use links of invitations and password resets, each mailed with a six-digit code that
 * works in its place from any browser (`POST /api/auth/password-reset/confirm` takes either): a new
 * link retires the older ones of its purpose, so only the latest works; the email carrying it goes
 * to the outbox in the caller's transaction, its link and code sealed.
 */
export class AccountLinks {
  readonly #deps: AccountLinksDeps

  constructor(deps: AccountLinksDeps) {
    this.#deps = deps
  }

  async send(
    trx: Tx,
    account: Pick<AccountRow, 'id' | 'email' | 'organization_id'>,
    purpose: OneTimeTokenPurpose,
    now: Date,
  ): Promise<void> {
    const { auth, web } = this.#deps.config
    const ttl = purpose === 'INVITATION' ? auth.invitation.ttl : auth.passwordReset.ttl
    await retireOneTimeTokens(trx, account.id, now, purpose)
    const token = newOpaqueToken()
    const code = newCode()
    await insertOneTimeToken(trx, {
      accountId: account.id,
      purpose,
      tokenHash: token.hash,
      codeHash: codeHash(token.hash, code),
      now,
      expiresAt: new Date(now.getTime() + ttl * 1000),
    })
    const { path, template } = LINK_PATHS[purpose]
    const link = new URL(path, web.frontendUrl)
    link.searchParams.set('token', token.raw)
    await enqueueMail(
      trx,
      {
        template,
        to: account.email,
        data: this.#deps.sealMail({
          link: link.toString(),
          code,
          codeMinutes: Math.ceil(auth.emailProof.ttl / 60),
        }),
        organizationId: account.organization_id,
      },
      now,
    )
  }
}
