import { sql } from 'kysely'
import type { Executor } from '../../db/schema.ts'

// The deletes of the retention rules (src/features/retention/rules.ts): each removes at most `limit`
// rows that may go at the given cutoff and returns how many it removed, so no sweep holds long locks.

const removed = (result: { numDeletedRows: bigint }) => Number(result.numDeletedRows)

/** Outbox rows delivered (or set aside) before the cutoff. */
export async function deleteProcessedTupleChanges(
  db: Executor,
  cutoff: Date,
  limit: number,
): Promise<number> {
  const result = await db
    .deleteFrom('authz_outbox')
    .where('id', 'in', (eb) =>
      eb.selectFrom('authz_outbox').select('id').where('processed_at', '<', cutoff).limit(limit),
    )
    .executeTakeFirst()
  return removed(result)
}

/** Mail sent or given up before the cutoff. */
export async function deleteFinishedMail(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('mail_outbox')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('mail_outbox')
        .select('id')
        .where((w) => w.or([w('sent_at', '<', cutoff), w('failed_at', '<', cutoff)]))
        .limit(limit),
    )
    .executeTakeFirst()
  return removed(result)
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
  return removed(result)
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
  return removed(result)
}

/** One-time tokens used or expired before the cutoff. */
export async function deleteSpentOneTimeTokens(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('one_time_tokens')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('one_time_tokens')
        .select('id')
        .where((w) => w.or([w('used_at', '<', cutoff), w('expires_at', '<', cutoff)]))
        .limit(limit),
    )
    .executeTakeFirst()
  return removed(result)
}

/** Uploads never confirmed (PENDING, or REJECTED as too large) that were started before the cutoff. */
export function findUnfinishedFiles(
  db: Executor,
  cutoff: Date,
  limit: number,
): Promise<{ id: string; object_key: string; status: string }[]> {
  return db
    .selectFrom('files')
    .select(['id', 'object_key', 'status'])
    .where('status', '<>', 'CONFIRMED')
    .where('created_at', '<', cutoff)
    .orderBy('created_at')
    .limit(limit)
    .execute()
}

/** Deletes those of the given files that are still unfinished (a confirm may have won since). */
export async function deleteUnfinishedFiles(db: Executor, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0
  const result = await db
    .deleteFrom('files')
    .where('id', 'in', ids)
    .where('status', '<>', 'CONFIRMED')
    .executeTakeFirst()
  return removed(result)
}
