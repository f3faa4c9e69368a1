import { CompiledQuery, type Selectable, sql } from 'kysely'
import type { Executor, RefreshTokenTable, SessionTable, Tx } from '../../db/schema.ts'
import type { StatementHits } from '../../db/statement-limits.ts'
import { publishRevocation } from '../../security/revocation.ts'

export type SessionRow = Selectable<SessionTable>
export type RefreshTokenRow = Selectable<RefreshTokenTable>

/**
 * A new session and its first refresh token, in one statement (a data-modifying CTE): both exist
 * or neither does, with one round trip instead of BEGIN, two inserts and COMMIT.
 */
export async function insertSessionWithRefreshToken(
  db: Executor,
  values: {
    userId: string
    organizationId: string
    now: Date
    expiresAt: Date
    userAgent: string | null
    ipAddress: string | null
    tokenHash: string
    refreshExpiresAt: Date
    signInMethod: string
    /** An impersonation session: the admin who holds it, the admin's own session and the reason. */
    impersonation?: { impersonatorId: string; impersonatorSessionId: string; reason: string }
  },
): Promise<SessionRow> {
  return db
    .with('session', (w) =>
      w
        .insertInto('sessions')
        .values({
          user_id: values.userId,
          organization_id: values.organizationId,
          created_at: values.now,
          last_used_at: values.now,
          expires_at: values.expiresAt,
          user_agent: values.userAgent,
          ip_address: values.ipAddress,
          sign_in_method: values.signInMethod,
          ...(values.impersonation
            ? {
                impersonator_id: values.impersonation.impersonatorId,
                impersonator_session_id: values.impersonation.impersonatorSessionId,
                impersonation_reason: values.impersonation.reason,
              }
            : {}),
        })
        .returningAll(),
    )
    .with('token', (w) =>
      w
        .insertInto('refresh_tokens')
        .columns(['session_id', 'token_hash', 'created_at', 'expires_at'])
        .expression((eb) =>
          eb
            .selectFrom('session')
            .select([
              'session.id',
              sql.val(values.tokenHash).as('token_hash'),
              sql.val(values.now).as('created_at'),
              sql.val(values.refreshExpiresAt).as('expires_at'),
            ]),
        ),
    )
    .selectFrom('session')
    .selectAll()
    .executeTakeFirstOrThrow()
}

/**
 * The common end of a rotation's statement: the CTEs that insert the successor of the session the
 * `source` CTE returned (its columns `id`, `refresh_expires_at` and the parent's id in `parent`) and
 * touch that session.
 */
const successorAndTouch = (
  source: 'claimed' | 'retired',
  parent: 'claimed_token_id' | 'anchor_id',
  nextHash: string,
  now: Date,
) => sql`successor as (
      insert into refresh_tokens (session_id, parent_id, token_hash, created_at, expires_at)
      select id, ${sql.ref(parent)}, ${nextHash}, ${now}, refresh_expires_at from ${sql.table(source)}
      returning session_id
    ), touched as (
      update sessions set last_used_at = ${now} where id in (select session_id from successor)
    )`

/**
 * The rotation of a refresh token in one statement: counts the route's rate-limit hits (`hits`, of
 * the `StatementLimits` the service is handed) and, when they stayed within their allowance, claims
 * the token if it is active and its session is live, inserts its successor (expiring at
 * `now + ttlSeconds`, never after the session) and touches the session. Of any number of
 * concurrent callers with one token exactly one gets the session back: the row lock serialises
 * them and the others no longer match `rotated_at is null`. Nothing changes but the hits when the
 * token (null: none was presented) or its session cannot be used, or a limit is exceeded
 * (`session` undefined); `rateCounts` are the hits' counts.
 */
export async function rotateRefreshToken(
  db: Executor,
  rotation: {
    tokenHash: string | null
    nextHash: string
    now: Date
    ttlSeconds: number
    hits: StatementHits
  },
): Promise<{
  session: (SessionRow & { refresh_expires_at: Date }) | undefined
  rateCounts: (number | null)[]
}> {
  const { tokenHash, nextHash, now, ttlSeconds, hits } = rotation
  const { rows } = await sql<SessionRow & { refresh_expires_at: Date; rate_counts: (number | null)[] }>`
    with ${hits.ctes}claimed as (
      update refresh_tokens t set rotated_at = ${now}
      from sessions s
      where t.token_hash = ${tokenHash} and t.rotated_at is null and t.revoked_at is null
        and t.expires_at > ${now} and s.id = t.session_id and s.revoked_at is null and s.expires_at > ${now}
        and ${hits.within}
      returning s.*, t.id as claimed_token_id,
        least(${now}::timestamptz + make_interval(secs => ${ttlSeconds}), s.expires_at) as refresh_expires_at
    ), ${successorAndTouch('claimed', 'claimed_token_id', nextHash, now)}
    select claimed.*, ${hits.counts} as rate_counts from (values (1)) as one left join claimed on true`.execute(
    db,
  )
  const row = rows[0]
  return { session: row?.id ? row : undefined, rateCounts: row?.rate_counts ?? [] }
}

/**
 * The refresh reuse grace, in one statement: a rotated token presented again is accepted when the
 * session's live token is its child or its sibling (an unused successor issued for the same parent),
 * that parent was rotated less than `graceSeconds` ago, and the session is live. The live token is
 * then retired (marked rotated, never to be accepted again after the grace) and a new successor of
 * the same parent takes its place, so exactly one token of the session stays live. Once the live
 * token has been used itself, its parent and siblings no longer match: presenting them is reuse.
 * `session` is undefined when nothing was rotated; `candidates` > 0 then means a concurrent
 * rotation took the live token first, and the statement is worth running again.
 */
export async function rotateWithinGrace(
  db: Executor,
  rotation: { tokenHash: string; nextHash: string; now: Date; ttlSeconds: number; graceSeconds: number },
): Promise<{ session: (SessionRow & { refresh_expires_at: Date }) | undefined; candidates: number }> {
  const { tokenHash, nextHash, now, ttlSeconds, graceSeconds } = rotation
  const { rows } = await sql<SessionRow & { refresh_expires_at: Date; candidates: number }>`
    with presented as (
      select p.id, p.parent_id, p.session_id from refresh_tokens p
      where p.token_hash = ${tokenHash} and p.rotated_at is not null and p.revoked_at is null
    ), live as (
      select l.id from presented p
      join refresh_tokens l on l.session_id = p.session_id
        and l.rotated_at is null and l.revoked_at is null and l.expires_at > ${now}
        and (l.parent_id = p.id or l.parent_id = p.parent_id)
      join refresh_tokens a on a.id = l.parent_id
        and a.rotated_at > ${now}::timestamptz - make_interval(secs => ${graceSeconds})
    ), retired as (
      update refresh_tokens t set rotated_at = ${now}
      from live, sessions s
      where t.id = live.id and t.rotated_at is null and t.revoked_at is null
        and s.id = t.session_id and s.revoked_at is null and s.expires_at > ${now}
      returning s.*, t.parent_id as anchor_id,
        least(${now}::timestamptz + make_interval(secs => ${ttlSeconds}), s.expires_at) as refresh_expires_at
    ), ${successorAndTouch('retired', 'anchor_id', nextHash, now)}
    select retired.*, (select count(*) from live)::int as candidates
    from (values (1)) as one left join retired on true`.execute(db)
  const row = rows[0]
  return { session: row?.id ? row : undefined, candidates: row?.candidates ?? 0 }
}

export function findRefreshToken(db: Executor, tokenHash: string): Promise<RefreshTokenRow | undefined> {
  return db.selectFrom('refresh_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst()
}

export function findSession(db: Executor, id: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('id', '=', id).executeTakeFirst()
}

/**
 * Revokes sessions (and all their refresh tokens) that are still active and announces it to every
 * instance (a user's sessions as the user, one session by its id); returns their ids. A user's
 * sessions may leave one out (`exceptSessionId`): it is dropped from the caches with the others and
 * read again, still live.
 */
export async function revokeSessions(
  db: Tx,
  where: { sessionId?: string; userId?: string; exceptSessionId?: string },
  now: Date,
  reason: string,
): Promise<string[]> {
  let query = db
    .updateTable('sessions')
    .set({ revoked_at: now, revoked_reason: reason })
    .where('revoked_at', 'is', null)
  if (where.sessionId) query = query.where('id', '=', where.sessionId)
  if (where.userId) query = query.where('user_id', '=', where.userId)
  if (where.exceptSessionId) query = query.where('id', '<>', where.exceptSessionId)
  const revoked = await query.returning('id').execute()
  const ids = revoked.map((row) => row.id)
  if (ids.length > 0) {
    await db
      .updateTable('refresh_tokens')
      .set({ revoked_at: now })
      .where('session_id', 'in', ids)
      .where('revoked_at', 'is', null)
      .execute()
    if (where.sessionId) await publishRevocation(db, { kind: 'session', id: where.sessionId })
  }
  if (!where.sessionId && where.userId) await publishRevocation(db, { kind: 'user', id: where.userId })
  return ids
}

/** A session as the session list shows it; the times are ISO 8601 text (`toISOString`'s form). */
export interface ActiveSessionRow {
  id: string
  created_at: string
  last_used_at: string
  refresh_expires_at: string
  user_agent: string | null
  ip_address: string | null
  sign_in_method: string | null
  /** The admin holding the session as its user (impersonation); null for the user's own. */
  impersonator_id: string | null
}

// Times rendered by PostgreSQL exactly as `Date.prototype.toISOString` renders them (UTC,
// milliseconds truncated as JavaScript's dates truncate them), since they are only serialised.
const isoText = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`

// Built once: the list is read on every GET /api/auth/sessions, and its text never changes.
const ACTIVE_SESSIONS = `select s.id, ${isoText('s.created_at')} as created_at,
  ${isoText('s.last_used_at')} as last_used_at, ${isoText('t.expires_at')} as refresh_expires_at,
  s.user_agent, s.ip_address, s.sign_in_method, s.impersonator_id
from sessions s join refresh_tokens t on t.session_id = s.id
where s.user_id = $1 and s.revoked_at is null
  and t.rotated_at is null and t.revoked_at is null and t.expires_at > $2
order by s.created_at desc`

/**
 * The user's sessions that can still be refreshed: not revoked and holding an unexpired, unused
 * refresh token. `refresh_expires_at` is when the session ends unless it is refreshed.
 */
export async function listActiveSessions(
  db: Executor,
  userId: string,
  now: Date,
): Promise<ActiveSessionRow[]> {
  const query = CompiledQuery.raw(ACTIVE_SESSIONS, [
    userId,
    now.toISOString(),
  ]) as CompiledQuery<ActiveSessionRow>
  const { rows } = await db.executeQuery(query)
  return rows
}

/**
 * What decides whether a session's access tokens are still accepted: its user, whether it was
 * revoked and the user's session version (null when the account is gone); for an impersonation
 * session, the admin holding it and whether that account is still an active admin.
 */
export async function findSessionState(
  db: Executor,
  sessionId: string,
): Promise<
  | {
      user_id: string
      revoked: boolean
      session_version: number | null
      impersonator_id: string | null
      impersonator_allowed: boolean
    }
  | undefined
> {
  return db
    .selectFrom('sessions')
    .leftJoin('accounts', 'accounts.id', 'sessions.user_id')
    .leftJoin('accounts as impersonator', 'impersonator.id', 'sessions.impersonator_id')
    .select(['sessions.user_id', 'accounts.session_version', 'sessions.impersonator_id'])
    .select(sql<boolean>`sessions.revoked_at is not null`.as('revoked'))
    .select(
      sql<boolean>`(sessions.impersonator_id is null or coalesce(impersonator.active and impersonator.role = 'admin', false))`.as(
        'impersonator_allowed',
      ),
    )
    .where('sessions.id', '=', sessionId)
    .executeTakeFirst()
}

/**
 * Refresh tokens that can never be presented again usefully: expired at `now` and belonging to a
 * session that has ended. The rotated tokens of a live session stay: reuse detection needs them.
 */
export async function deleteDeadRefreshTokens(db: Executor, now: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('refresh_tokens')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('refresh_tokens as t')
        .innerJoin('sessions as s', 's.id', 't.session_id')
        .select('t.id')
        .where('t.expires_at', '<', now)
        .where((w) => w.or([w('s.revoked_at', 'is not', null), w('s.expires_at', '<', now)]))
        .limit(limit),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}

/** Sessions that ended (revoked or past their absolute expiry) before the cutoff, with their tokens. */
export async function deleteEndedSessions(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('sessions')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('sessions')
        .select('id')
        .where(sql<boolean>`coalesce(revoked_at, expires_at) < ${cutoff}`)
        .limit(limit),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}

/**
 * Retires the live refresh tokens of a session without revoking it: an admin's own session while
 * the admin impersonates someone (its refresh cookie was replaced), until `addRefreshToken` gives
 * it a new one. A retired token presented again is refused as unknown, not as reuse.
 */
export async function retireRefreshTokens(trx: Tx, sessionId: string, now: Date): Promise<void> {
  await trx
    .updateTable('refresh_tokens')
    .set({ revoked_at: now })
    .where('session_id', '=', sessionId)
    .where('revoked_at', 'is', null)
    .where('rotated_at', 'is', null)
    .execute()
}

/** A new first refresh token of a live session (expiring at `expiresAt`). */
export async function addRefreshToken(
  trx: Tx,
  values: { sessionId: string; tokenHash: string; now: Date; expiresAt: Date },
): Promise<void> {
  await trx
    .insertInto('refresh_tokens')
    .values({
      session_id: values.sessionId,
      parent_id: null,
      token_hash: values.tokenHash,
      created_at: values.now,
      expires_at: values.expiresAt,
    })
    .execute()
}
