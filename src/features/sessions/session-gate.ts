import type { Kysely } from 'kysely'
import { InvalidatedCache } from '../../db/invalidated-cache.ts'
import type { Database } from '../../db/schema.ts'
import type { Revocation, RevocationListener } from '../../security/revocation.ts'
import type { UserTokenClaims } from '../../security/tokens.ts'
import { findSessionState } from './repository.ts'
import type { SessionVersionProvider } from './session-version.ts'

interface SessionState {
  userId: string
  /** The admin holding an impersonation session, whose loss of access ends it too. */
  impersonatorId: string | null
  revoked: boolean
  /** The account's session version, read with the session (the built-in provider). */
  version: number | null
}

/**
 * Whether a user access token is still accepted, when session versions are enforced: its session
 * is not revoked, and its `ver` is the user's current session version. What a session's tokens
 * depend on is cached by session id (one statement per session and `fallback-ttl`, none per
 * request); a revoked session, or anything that ends a user's access, is pushed to every instance
 * (src/security/revocation.ts) and drops it. With the built-in provider the version is read in the
 * same statement; a deployment's own provider is asked on every request, as it caches for itself.
 */
export class SessionGate implements RevocationListener {
  readonly #db: Kysely<Database>
  readonly #provider: SessionVersionProvider | null
  readonly #states: InvalidatedCache<SessionState>

  readonly #versions: boolean

  /**
   * `versions: false`: only whether the session is revoked counts (the gate of impersonation
   * tokens when session versions are not enforced).
   */
  constructor(deps: {
    db: Kysely<Database>
    ttlMs: number
    provider: SessionVersionProvider | null
    versions?: boolean
  }) {
    this.#db = deps.db
    this.#provider = deps.provider
    this.#versions = deps.versions ?? true
    this.#states = new InvalidatedCache({ max: 50_000, ttl: deps.ttlMs })
  }

  async admits(claims: UserTokenClaims): Promise<boolean> {
    const state = await this.#states.load(claims.sid, async () => {
      const row = await findSessionState(this.#db, claims.sid)
      if (!row) return { userId: '', impersonatorId: null, revoked: true, version: null }
      // With the built-in provider a session whose account is gone is over.
      const gone = this.#provider === null && row.session_version === null
      return {
        userId: row.user_id,
        impersonatorId: row.impersonator_id,
        revoked: row.revoked || gone || !row.impersonator_allowed,
        version: row.session_version,
      }
    })
    if (state.revoked || state.userId !== claims.sub) return false
    if (!this.#versions) return true
    const version = this.#provider ? await this.#provider.currentVersion(claims.sub) : state.version
    return version === null || version === claims.ver
  }

  /** `admits`, with the session's state read afresh (and cached again). */
  admitsAfresh(claims: UserTokenClaims): Promise<boolean> {
    this.#states.delete(claims.sid)
    return this.admits(claims)
  }

  revoked(revocation: Revocation): void {
    if (revocation.kind === 'session') this.#states.delete(revocation.id)
    else if (revocation.kind === 'user')
      this.#states.deleteWhere(
        (state) => state.userId === revocation.id || state.impersonatorId === revocation.id,
      )
  }

  clear(): void {
    this.#states.clear()
  }
}
