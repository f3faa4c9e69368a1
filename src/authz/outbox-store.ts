import type { Selectable } from 'kysely'
import type { AuthzOutboxTable, Executor } from '../db/schema.ts'

// The authorization outbox's statements (src/authz/outbox-worker.ts is the worker): the ordered
// log of tuple changes; a row is pending until processed_at is set.

export type AuthzOutboxRow = Selectable<AuthzOutboxTable>

/** The oldest pending changes, in the order they were queued. */
export function pendingTupleChanges(db: Executor, limit: number): Promise<AuthzOutboxRow[]> {
  return db
    .selectFrom('authz_outbox')
    .selectAll()
    .where('processed_at', 'is', null)
    .orderBy('id')
    .limit(limit)
    .execute()
}

export async function markTupleChangesDelivered(db: Executor, ids: string[], now: Date): Promise<void> {
  await db
    .updateTable('authz_outbox')
    .set({ processed_at: now, last_error: null })
    .where('id', 'in', ids)
    .execute()
}

/** Dead letter: a change the model rejects is set aside (never retried) with its error. */
export async function setTupleChangeAside(db: Executor, id: string, error: string, now: Date): Promise<void> {
  await db
    .updateTable('authz_outbox')
    .set({ processed_at: now, failed_at: now, last_error: `rejected: ${error.slice(0, 480)}` })
    .where('id', '=', id)
    .execute()
}

/** A failed delivery of the head of the queue: it, and everything behind it, waits until `nextAttemptAt`. */
export async function deferTupleChange(
  db: Executor,
  id: string,
  outcome: { attempts: number; nextAttemptAt: Date; error: string },
): Promise<void> {
  await db
    .updateTable('authz_outbox')
    .set({
      attempts: outcome.attempts,
      next_attempt_at: outcome.nextAttemptAt,
      last_error: outcome.error.slice(0, 500),
    })
    .where('id', '=', id)
    .execute()
}

/** Makes every waiting change due at `now`: an explicit delivery does not wait for a backoff. */
export async function makeTupleChangesDue(db: Executor, now: Date): Promise<void> {
  await db
    .updateTable('authz_outbox')
    .set({ next_attempt_at: now })
    .where('processed_at', 'is', null)
    .where('next_attempt_at', '>', now)
    .execute()
}

/** How many changes wait, and the last delivery error among them. */
export async function tupleChangeBacklog(
  db: Executor,
): Promise<{ pending: number; lastError: string | null }> {
  const row = await db
    .selectFrom('authz_outbox')
    .select((eb) => [eb.fn.countAll<string>().as('n'), eb.fn.max('last_error').as('lastError')])
    .where('processed_at', 'is', null)
    .executeTakeFirstOrThrow()
  return { pending: Number(row.n), lastError: row.lastError ?? null }
}

/** Whether a change about `subject` or `object` still waits for delivery (a partial-index scan of the backlog). */
export async function hasPendingTupleChange(db: Executor, subject: string, object: string): Promise<boolean> {
  const row = await db
    .selectFrom('authz_outbox')
    .select('id')
    .where('processed_at', 'is', null)
    .where((eb) => eb.or([eb('object', '=', object), eb('subject', '=', subject)]))
    .limit(1)
    .executeTakeFirst()
  return row !== undefined
}

/** Outbox rows delivered (or set aside) before the cutoff; returns how many went. */
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
  return Number(result.numDeletedRows)
}
