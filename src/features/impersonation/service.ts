import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database, Executor } from '../../db/schema.ts'
import { tenantScope } from '../../db/tenant-scope.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import type { UserPrincipal } from '../../principal.ts'
import {
  type AccountRow,
  findOwnAccount,
  lockAccountOfOrganization,
  organizationAdmin,
} from '../accounts/index.ts'
import type {
  ClientInfo,
  IssuedSession,
  PasskeyAssertion,
  SecondFactorCheck,
  SessionService,
} from '../sessions/index.ts'

/** How recent a second factor given at sign-in must be to stand for the proof impersonation needs. */
const RECENT_PROOF_MS = 5 * 60_000

export interface ImpersonationDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  sessions: SessionService
  secondFactor: SecondFactorCheck
  /** Drops a revoked session from this instance's caches at once (the others hear of it by the push). */
  forgetSession: (sessionId: string) => void
}

const forbidden = (detail: string) => new AppError('IMPERSONATION_FORBIDDEN', detail)

/**
 * An organization admin acting as one of the organization's active members, to see what they see:
 * a session of the member's held by the admin (src/features/sessions/service.ts), whose tokens name
 * the admin (`act`) and whose every change the audit trail records as the admin's on the member's
 * behalf. Who may start is decided by the caller's account row, as all user administration is.
 */
export class Impersonation {
  readonly #deps: ImpersonationDeps

  constructor(deps: ImpersonationDeps) {
    this.#deps = deps
  }

  /**
   * Starts impersonating `targetId` for the admin `caller`: never oneself, another admin, a member
   * who is not active, nor while impersonating already (403 IMPERSONATION_FORBIDDEN); someone of
   * another organization or no one is 404. An admin with a second factor proves it: a code or
   * passkey given with the request, or a sign-in with one less than 5 minutes ago (403
   * OTP_REQUIRED without; 403 INVALID_OTP for a wrong code). The session, the retirement of the
   * admin's own refresh token, the event and the mail to the member commit together.
   */
  async start(
    caller: UserPrincipal,
    targetId: string,
    input: { reason: string; otpCode?: string | undefined; passkey?: PasskeyAssertion | undefined },
    client: ClientInfo,
  ): Promise<IssuedSession> {
    const { db, clock, audit, sessions } = this.#deps
    if (caller.impersonatorId) throw forbidden('You are impersonating a user already; stop first')
    const tenant = tenantScope()
    const admin = await this.#admin(db, caller, tenant.organizationId)
    await this.#proveSecondFactor(caller, admin, input)
    const pending = await inTransaction(db, async (trx) => {
      // Read again under the transaction: a demotion or deactivation since the proof counts.
      const current = await this.#admin(trx, caller, tenant.organizationId)
      const target = await lockAccountOfOrganization(trx, tenant, targetId)
      if (!target) throw new AppError('NOT_FOUND', 'No such user')
      if (target.id === current.id) throw forbidden('You cannot impersonate yourself')
      if (target.role === 'admin') throw forbidden('Admins cannot impersonate another admin')
      if (!target.active) throw forbidden('Only active members can be impersonated')
      const started = await sessions.startImpersonation(trx, {
        user: { userId: target.id, organizationId: tenant.organizationId },
        admin: { userId: current.id, sessionId: caller.sessionId },
        reason: input.reason,
        client,
      })
      await audit.record(trx, {
        type: 'impersonation.started',
        organizationId: tenant.organizationId,
        actor: { type: 'user', id: current.id },
        subject: { type: 'user', id: target.id },
        data: { reason: input.reason, sessionId: started.session.id },
      })
      await enqueueMail(
        trx,
        {
          template: 'impersonation_started',
          to: target.email,
          data: {
            adminEmail: current.email,
            reason: input.reason,
            until: started.session.expires_at.toISOString(),
          },
          organizationId: tenant.organizationId,
        },
        clock.now(),
      )
      return started
    })
    return sessions.issue(pending)
  }

  #admin(db: Executor, caller: UserPrincipal, organizationId: string): Promise<AccountRow> {
    return organizationAdmin(db, caller.userId, organizationId)
  }

  async #proveSecondFactor(
    caller: UserPrincipal,
    admin: AccountRow,
    given: { otpCode?: string | undefined; passkey?: PasskeyAssertion | undefined },
  ): Promise<void> {
    const { db, clock, sessions } = this.#deps
    const own = await findOwnAccount(db, tenantScope(), admin.id)
    if (!own || (!own.otp_enabled && own.passkey_count === 0)) return
    if (given.otpCode === undefined && given.passkey === undefined) {
      if (
        await sessions.signedInWithSecondFactorSince(
          caller.sessionId,
          clock.now().getTime() - RECENT_PROOF_MS,
        )
      )
        return
      throw new AppError('OTP_REQUIRED', 'Confirm with your one-time password or a passkey first', {
        status: 403,
      })
    }
    const factor = await this.#deps.secondFactor(admin, { otpCode: given.otpCode, passkey: given.passkey })
    if (factor === 'otp' || factor === 'passkey') return
    throw new AppError('INVALID_OTP', 'The one-time password is not correct', { status: 403 })
  }

  /** Ends the caller's impersonation; the admin's own session when it is still live, or null. */
  async stop(caller: UserPrincipal): Promise<IssuedSession | null> {
    if (!caller.impersonatorId) throw new AppError('NOT_FOUND', 'No impersonation in progress')
    const { restored } = await this.#deps.sessions.stopImpersonation(caller)
    this.#deps.forgetSession(caller.sessionId)
    return restored ? this.#deps.sessions.issue(restored) : null
  }
}
