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

export async function enqueueTupleChanges(trx: Tx, changes: TupleChange[], now: Date): Promise<void> {
  if (changes.length === 0) return
  await trx
    .insertInto('authz_outbox')
    .values(changes.map((c) => ({ ...c, created_at: now, next_attempt_at: now })))
    .execute()
}
