import type { Kysely } from 'kysely'
import type { AuditActor, AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import type { StatementLimits } from '../../db/statement-limits.ts'
import { AppError } from '../../errors.ts'
import type { EventBus } from '../../events.ts'
import { type AccessTokens, type IssuedToken, newOpaqueToken, sha256 } from '../../security/tokens.ts'
import {
  type ActiveSessionRow,
  addRefreshToken,
  findRefreshToken,
  findSession,
  insertSessionWithRefreshToken,
  listActiveSessions,
  retireRefreshTokens,
  revokeSessions,
  rotateRefreshToken,
  rotateWithinGrace,
  type SessionRow,
} from './repository.ts'
import type { SessionVersionProvider } from './session-version.ts'

export interface IssuedSession {
  userId: string
  organizationId: string
  sessionId: string
  accessToken: IssuedToken
  refreshToken: { raw: string; expiresAt: Date }
}

/** How a session was signed in to: the factors it was given. */
export type SignInMethod = (typeof SIGN_IN_METHODS)[number]

/**
 * Every way a session is signed in to: a password, a passkey alone, a mailed link or code (email
 * sign-in, or the sign-up that proved the address), an OpenID Connect provider, each with the second
 * factor it was given.
 */
export const SIGN_IN_METHODS = [
  'password',
  'password+otp',
  'password+passkey',
  'passkey',
  'email_link',
  'email_link+otp',
  'email_link+passkey',
  'email_code',
  'email_code+otp',
  'email_code+passkey',
  'oidc',
  'oidc+otp',
  'oidc+passkey',
  /** An organization admin holding the session as its user. */
  'impersonation',
] as const

export interface ClientInfo {
  userAgent: string | null
  ipAddress: string | null
}

/**
 * A rule a sign-in must pass before its session starts, once the credentials were proved (so its
 * refusal says nothing about whether an account exists): throws an AppError to refuse.
 */
export type SignInPolicy = (
  user: { userId: string; organizationId: string },
  signInMethod: SignInMethod,
  context: SignInContext,
) => Promise<void>

/** What a sign-in policy knows of the sign-in beyond its method. */
export interface SignInContext {
  /** An identity provider sign-in through the user's organization's own SSO connection. */
  organizationConnection: boolean
}

export interface SessionServiceDeps {
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  config: Config
  tokens: AccessTokens
  events: EventBus
  versions: SessionVersionProvider | null
  /**
   * What the organization's policies say of its sessions, read once per sign-in or refresh; none:
   * no limit of age or address.
   */
  sessionPolicy?: (organizationId: string) => Promise<SessionPolicy>
  /** Checked before every session starts (organization SSO enforcement); none: every sign-in passes. */
  signInPolicy?: SignInPolicy | undefined
}

/** An organization's policies on its sessions (`security.session-max-age`, `security.ip-allowlist`). */
export interface SessionPolicy {
  /** The longest a session may be refreshed after its sign-in, in seconds; null: no limit. */
  maxAge: number | null
  /** Throws the refusal (403 IP_NOT_ALLOWED) of a sign-in or refresh from the address. */
  admitAddress(ip: string | null): void
}

/** A session made in a caller's transaction, whose tokens are issued once that commits (`issue`). */
export interface PendingSession {
  session: SessionRow
  refreshToken: { raw: string; expiresAt: Date }
}

const USER_AGENT_MAX = 512
/** How often a refresh within the reuse grace is tried again after concurrent ones took the live token. */
const GRACE_ATTEMPTS = 16

/**
 * A failure while rotating is not reuse: anything but a deliberate AppError answers
 * 503 and, the transaction having rolled back, leaves the session as it was.
 */
async function unavailableOnFailure<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (error) {
    if (error instanceof AppError) throw error
    throw new AppError('SERVICE_UNAVAILABLE', 'The session could not be refreshed; retry', {
      cause: error,
      headers: { 'retry-after': '1' },
    })
  }
}

const addSeconds = (date: Date, seconds: number) => new Date(date.getTime() + seconds * 1000)
const earliest = (a: Date, b: Date) => (a.getTime() <= b.getTime() ? a : b)

/**
 * User sessions: one row per login, with a chain of single-use refresh tokens. Rotation is strict
 * by default: presenting a rotated token again revokes the whole session. With
 * `platform.auth.refresh.reuse-grace` set, a rotated token presented again within the grace, while
 * its successor is unused, gets a new successor instead (src/features/sessions/repository.ts
 * `rotateWithinGrace`). A session never outlives
 * `platform.auth.session.absolute-ttl` from its login, however often it is refreshed.
 */
export class SessionService {
  readonly #deps: SessionServiceDeps

  constructor(deps: SessionServiceDeps) {
    this.#deps = deps
  }

  async #accessToken(
    session: Pick<SessionRow, 'id' | 'user_id' | 'organization_id' | 'impersonator_id' | 'expires_at'>,
  ): Promise<IssuedToken> {
    const version = (await this.#deps.versions?.currentVersion(session.user_id)) ?? 0
    const claims = { sub: session.user_id, sid: session.id, org: session.organization_id, ver: version }
    // An impersonation session's tokens name the admin acting (`act`) and never outlive the session.
    if (!session.impersonator_id) return this.#deps.tokens.issueUserToken(claims)
    return this.#deps.tokens.issueUserToken(
      { ...claims, act: { sub: session.impersonator_id } },
      session.expires_at,
    )
  }

  async start(
    user: { userId: string; organizationId: string },
    client: ClientInfo,
    signInMethod: SignInMethod = 'password',
    context: SignInContext = { organizationConnection: false },
  ): Promise<IssuedSession> {
    const { db, clock, config } = this.#deps
    try {
      await this.#deps.signInPolicy?.(user, signInMethod, context)
      const policy = await this.#deps.sessionPolicy?.(user.organizationId)
      policy?.admitAddress(client.ipAddress)
    } catch (refusal) {
      if (refusal instanceof AppError) await this.#refusedByPolicy(user, signInMethod, refusal.code)
      throw refusal
    }
    const now = clock.now()
    const refresh = newOpaqueToken()
    const expiresAt = addSeconds(now, config.auth.session.absoluteTtl)
    // The session and its sign-in event commit together.
    const session = await inTransaction(db, async (trx) => {
      const started = await insertSessionWithRefreshToken(trx, {
        userId: user.userId,
        organizationId: user.organizationId,
        now,
        expiresAt,
        userAgent: client.userAgent?.slice(0, USER_AGENT_MAX) ?? null,
        ipAddress: client.ipAddress,
        tokenHash: refresh.hash,
        refreshExpiresAt: this.#refreshExpiry(now, expiresAt),
        signInMethod,
      })
      await this.#deps.audit.record(trx, {
        type: 'sign_in.succeeded',
        organizationId: user.organizationId,
        actor: { type: 'user', id: user.userId },
        subject: { type: 'session', id: started.id },
        data: { method: signInMethod },
      })
      return started
    })
    return this.#issued(session, refresh.raw, this.#refreshExpiry(now, session.expires_at))
  }

  /** The audit event of a sign-in whose credentials were proved but which a policy refused. */
  #refusedByPolicy(
    user: { userId: string; organizationId: string },
    method: SignInMethod,
    code: string,
  ): Promise<void> {
    return inTransaction(this.#deps.db, (trx) =>
      this.#deps.audit.record(trx, {
        type: 'sign_in.failed',
        organizationId: user.organizationId,
        actor: { type: 'system', id: null },
        subject: { type: 'user', id: user.userId },
        data: { method, reason: code },
      }),
    )
  }

  #refreshExpiry(now: Date, sessionExpiresAt: Date): Date {
    return earliest(addSeconds(now, this.#deps.config.auth.refreshToken.ttl), sessionExpiresAt)
  }

  /**
   * An impersonation session, in the caller's transaction: the user's session, held by the admin,
   * lasting at most `platform.auth.impersonation.max-duration` however often it is refreshed. The
   * admin's own session keeps no usable refresh token meanwhile (the browser's cookie is replaced);
   * `stopImpersonation` gives it one again.
   */
  async startImpersonation(
    trx: Tx,
    values: {
      user: { userId: string; organizationId: string }
      admin: { userId: string; sessionId: string }
      reason: string
      client: ClientInfo
    },
  ): Promise<PendingSession> {
    const { clock, config } = this.#deps
    const now = clock.now()
    const refresh = newOpaqueToken()
    const expiresAt = earliest(
      addSeconds(now, config.auth.impersonation.maxDuration),
      addSeconds(now, config.auth.session.absoluteTtl),
    )
    const refreshExpiresAt = this.#refreshExpiry(now, expiresAt)
    const session = await insertSessionWithRefreshToken(trx, {
      userId: values.user.userId,
      organizationId: values.user.organizationId,
      now,
      expiresAt,
      userAgent: values.client.userAgent?.slice(0, USER_AGENT_MAX) ?? null,
      ipAddress: values.client.ipAddress,
      tokenHash: refresh.hash,
      refreshExpiresAt,
      signInMethod: 'impersonation',
      impersonation: {
        impersonatorId: values.admin.userId,
        impersonatorSessionId: values.admin.sessionId,
        reason: values.reason,
      },
    })
    await retireRefreshTokens(trx, values.admin.sessionId, now)
    return { session, refreshToken: { raw: refresh.raw, expiresAt: refreshExpiresAt } }
  }

  /**
   * Ends the impersonation session of the principal at once, on every instance (the revocation is
   * pushed), and gives the admin's own session, when it is still live, a new refresh token: the
   * pending session to issue, or null when the admin must sign in again. 404 when the session is
   * not an impersonation one (or has ended already).
   */
  async stopImpersonation(user: {
    userId: string
    sessionId: string
    impersonatorId?: string | undefined
  }): Promise<{ session: SessionRow; restored: PendingSession | null }> {
    const { db, clock, config } = this.#deps
    const now = clock.now()
    return inTransaction(db, async (trx) => {
      const impersonation = await findSession(trx, user.sessionId)
      if (!impersonation?.impersonator_id || impersonation.impersonator_id !== user.impersonatorId)
        throw new AppError('NOT_FOUND', 'No impersonation in progress')
      const revoked = await revokeSessions(trx, { sessionId: impersonation.id }, now, 'impersonation_stopped')
      if (revoked.length === 0) throw new AppError('NOT_FOUND', 'No impersonation in progress')
      await this.#deps.audit.record(trx, {
        type: 'impersonation.stopped',
        organizationId: impersonation.organization_id,
        actor: { type: 'user', id: impersonation.impersonator_id },
        subject: { type: 'user', id: impersonation.user_id },
        data: { sessionId: impersonation.id },
      })
      const own = impersonation.impersonator_session_id
        ? await findSession(trx, impersonation.impersonator_session_id)
        : undefined
      if (
        !own ||
        own.revoked_at ||
        own.expires_at.getTime() <= now.getTime() ||
        own.user_id !== user.impersonatorId
      )
        return { session: impersonation, restored: null }
      const refresh = newOpaqueToken()
      const expiresAt = earliest(addSeconds(now, config.auth.refreshToken.ttl), own.expires_at)
      await addRefreshToken(trx, { sessionId: own.id, tokenHash: refresh.hash, now, expiresAt })
      return {
        session: impersonation,
        restored: { session: own, refreshToken: { raw: refresh.raw, expiresAt } },
      }
    })
  }

  /** Whether the session was signed in to with a second factor at `since` (epoch ms) or later. */
  async signedInWithSecondFactorSince(sessionId: string, since: number): Promise<boolean> {
    const session = await findSession(this.#deps.db, sessionId)
    return (
      session !== undefined &&
      session.created_at.getTime() >= since &&
      /(^|\+)(otp|passkey)$/.test(session.sign_in_method ?? '')
    )
  }

  /** The tokens of a session made in a transaction that has committed. */
  issue(pending: PendingSession): Promise<IssuedSession> {
    return this.#issued(pending.session, pending.refreshToken.raw, pending.refreshToken.expiresAt)
  }

  /**
   * The organization's policies on a session just rotated. Refreshed longer than its
   * `security.session-max-age` after its sign-in, the session is revoked and the refresh refused (401
   * REFRESH_TOKEN_INVALID); refreshed from outside its `security.ip-allowlist`, the session is
   * revoked and the refresh refused with the allowlist's refusal (403 IP_NOT_ALLOWED). Its token
   * has rotated, so a refused session could not be refreshed again anyway: revoking says so in its
   * listing and in the audit trail, and ends it at once on every instance.
   */
  async #withinPolicy(session: SessionRow, now: Date, ip: string | null): Promise<void> {
    const policy = await this.#deps.sessionPolicy?.(session.organization_id)
    if (!policy) return
    if (policy.maxAge !== null && now.getTime() - session.created_at.getTime() > policy.maxAge * 1000) {
      await this.#revokeByPolicy(session, now, 'session_max_age')
      throw new AppError('REFRESH_TOKEN_INVALID', "The session is older than the organization's maximum age")
    }
    try {
      policy.admitAddress(ip)
    } catch (refusal) {
      await this.#revokeByPolicy(session, now, 'ip_not_allowed')
      throw refusal
    }
  }

  #revokeByPolicy(
    session: SessionRow,
    now: Date,
    reason: 'session_max_age' | 'ip_not_allowed',
  ): Promise<void> {
    return inTransaction(this.#deps.db, async (trx) => {
      const revoked = await revokeSessions(trx, { sessionId: session.id }, now, reason)
      if (revoked.length > 0) await this.#sessionRevoked(trx, session, reason, { type: 'system', id: null })
    })
  }

  async #issued(session: SessionRow, rawRefresh: string, refreshExpiresAt: Date): Promise<IssuedSession> {
    return {
      userId: session.user_id,
      organizationId: session.organization_id,
      sessionId: session.id,
      accessToken: await this.#accessToken(session),
      refreshToken: { raw: rawRefresh, expiresAt: refreshExpiresAt },
    }
  }

  /**
   * Rotates a refresh token. Exactly one of any number of concurrent calls with one token succeeds.
   * A database failure inside the rotation rolls it back and answers 503: the token stays usable.
   * The route's rate limits (`inStatement`), handed over as `rateLimits`, are counted by the
   * rotation's statement, whatever the token, and an exceeded one answers 429 RATE_LIMITED with
   * nothing rotated.
   */
  async refresh(
    rawToken: string | undefined,
    rateLimits: StatementLimits,
    ip: string | null,
  ): Promise<IssuedSession> {
    if (!rawToken && rateLimits.none) throw new AppError('REFRESH_TOKEN_INVALID', 'No refresh token')
    const { db, clock } = this.#deps
    const now = clock.now()
    const tokenHash = rawToken ? sha256(rawToken) : null
    const next = newOpaqueToken()
    const limits = rateLimits.at(now)
    // One statement: hits, claim, successor and touch commit together or not at all.
    const rotated = await unavailableOnFailure(() =>
      rotateRefreshToken(db, {
        tokenHash,
        nextHash: next.hash,
        now,
        ttlSeconds: this.#deps.config.auth.refreshToken.ttl,
        hits: limits.hits,
      }),
    )
    limits.check(rotated.rateCounts)
    if (rotated.session) {
      await this.#withinPolicy(rotated.session, now, ip)
      return this.#issued(rotated.session, next.raw, rotated.session.refresh_expires_at)
    }
    if (tokenHash === null) throw new AppError('REFRESH_TOKEN_INVALID', 'No refresh token')
    const graceSeconds = this.#deps.config.auth.refresh.reuseGrace
    // Each lost attempt means a concurrent request rotated first; every one of them succeeds.
    for (let attempt = 0; graceSeconds > 0 && attempt < GRACE_ATTEMPTS; attempt++) {
      const { session, candidates } = await unavailableOnFailure(() =>
        rotateWithinGrace(db, {
          tokenHash,
          nextHash: next.hash,
          now,
          ttlSeconds: this.#deps.config.auth.refreshToken.ttl,
          graceSeconds,
        }),
      )
      if (session) {
        await this.#withinPolicy(session, now, ip)
        return this.#issued(session, next.raw, session.refresh_expires_at)
      }
      if (candidates === 0) break
    }
    return this.#rejectUnclaimed(tokenHash, now)
  }

  async #rejectUnclaimed(tokenHash: string, now: Date): Promise<never> {
    const { db, events } = this.#deps
    const reuse = await unavailableOnFailure(async () => {
      const token = await findRefreshToken(db, tokenHash)
      if (!token?.rotated_at) return null
      return inTransaction(db, async (trx) => {
        const revoked = await revokeSessions(
          trx,
          { sessionId: token.session_id },
          now,
          'refresh_token_reuse_detected',
        )
        const session = await findSession(trx, token.session_id)
        if (session && revoked.length > 0) {
          // Whoever presented the token may be a thief: the system acts.
          await this.#deps.audit.record(trx, {
            type: 'refresh_token.reused',
            organizationId: session.organization_id,
            actor: { type: 'system', id: null },
            subject: { type: 'session', id: session.id },
            data: { userId: session.user_id },
          })
        }
        return { revokedNow: revoked.length > 0, userId: session?.user_id }
      })
    })
    if (!reuse)
      throw new AppError('REFRESH_TOKEN_INVALID', 'The refresh token is unknown, expired or revoked')
    // One event per incident: later presentations of tokens of an already revoked session publish nothing.
    if (reuse.revokedNow && reuse.userId) {
      await events.publish('UserSessionsRevokedEvent', {
        userId: reuse.userId,
        reason: 'refresh_token_reuse_detected',
      })
    }
    throw new AppError(
      'REFRESH_TOKEN_REUSED',
      'This refresh token was already used; the session has been revoked',
    )
  }

  /** Revokes the session a refresh token belongs to (in any state); unknown tokens are ignored. */
  async logout(rawToken: string | undefined): Promise<void> {
    if (!rawToken) return
    const { db, clock } = this.#deps
    const token = await findRefreshToken(db, sha256(rawToken))
    if (!token) return
    await inTransaction(db, async (trx) => {
      const revoked = await revokeSessions(trx, { sessionId: token.session_id }, clock.now(), 'logout')
      const session = revoked.length > 0 ? await findSession(trx, token.session_id) : undefined
      if (session) await this.#sessionRevoked(trx, session, 'logout')
    })
  }

  async logoutAll(user: { userId: string; organizationId: string }): Promise<void> {
    const { db, clock, events } = this.#deps
    const { userId } = user
    await inTransaction(db, async (trx) => {
      const revoked = await revokeSessions(trx, { userId }, clock.now(), 'logout_all')
      await this.#deps.audit.record(trx, {
        type: 'sessions.revoked_all',
        organizationId: user.organizationId,
        actor: { type: 'user', id: userId },
        subject: { type: 'user', id: userId },
        data: { sessions: revoked.length },
      })
    })
    await events.publish('UserSessionsRevokedEvent', { userId, reason: 'logout_all' })
  }

  #sessionRevoked(
    trx: Tx,
    session: SessionRow,
    reason: string,
    actor: AuditActor = { type: 'user', id: session.user_id },
  ): Promise<void> {
    return this.#deps.audit.record(trx, {
      type: 'session.revoked',
      organizationId: session.organization_id,
      actor,
      subject: { type: 'session', id: session.id },
      data: { reason },
    })
  }

  list(userId: string): Promise<ActiveSessionRow[]> {
    return listActiveSessions(this.#deps.db, userId, this.#deps.clock.now())
  }

  /** Revokes one of the user's own sessions; another user's or an unknown id is 404. */
  async revoke(userId: string, sessionId: string): Promise<void> {
    const { db, clock } = this.#deps
    await inTransaction(db, async (trx) => {
      const revoked = await revokeSessions(trx, { sessionId, userId }, clock.now(), 'revoked_by_user')
      const session = revoked.length > 0 ? await findSession(trx, sessionId) : undefined
      if (!session) throw new AppError('NOT_FOUND', 'No such active session')
      await this.#sessionRevoked(trx, session, 'revoked_by_user')
    })
  }
}
