import type { Tx } from '../db/schema.ts'

// The seam between the database and the authorization server: tuple changes are written to an
// outbox in the same transaction as the change that causes them, so the two never disagree for
// long; the authorization feature delivers them with retries.

export interface TupleChange {
  operation: 'write' | 'delete'
  subject: string
  relation: string
  object: string
}

/**
 * Appends tuple changes to the outbox, the ordered log of every change: queued for delivery, or
 * with `applied`, recorded as already delivered (by the embedded evaluator, in this transaction).
 */
export async function enqueueTupleChanges(
  trx: Tx,
  changes: TupleChange[],
  now: Date,
  applied = false,
): Promise<void> {
  if (changes.length === 0) return
  await trx
    .insertInto('authz_outbox')
    .values(outboxRowsOf(changes, now, applied))
    .execute()
}

/** The outbox rows of tuple changes (`applied`: already delivered, by the embedded evaluator). */
export function outboxRowsOf(changes: TupleChange[], now: Date, applied: boolean) {
  return changes.map((c) => ({
    ...c,
    created_at: now,
    next_attempt_at: now,
    processed_at: applied ? now : null,
  }))
}

/**
 * Where a unit of work records the tuple changes it causes, inside its own transaction. For an
 * authorization server elsewhere that is the outbox (delivered after commit, in order); the embedded
 * evaluator keeps its tuples in the same database, so it applies them in that transaction and a
 * change is visible to checks the moment it commits.
 */
export interface TupleRecorder {
  record(trx: Tx, changes: TupleChange[], now: Date): Promise<void>
  /**
   * After commit: starts delivering what was recorded, without waiting for it (what fails stays
   * queued for the worker). A check that would deny while a change about its subject or object
   * waits delivers it first (src/authz/permissions.ts), so a creator can read what they created.
   * Nothing to do when applied.
   */
  deliver(): Promise<void>
}
