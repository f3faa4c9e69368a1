import type { Selectable } from 'kysely'
import type { Executor, MailOutboxTable } from '../db/schema.ts'

// The mail outbox's statements (src/mail/outbox.ts is the worker). A claim is one short statement
// of its own, committed before any network I/O; every outcome is recorded only while the row's
// lease is still the claimer's.

export type MailOutboxRow = Selectable<MailOutboxTable>

export async function insertMail(
  trx: Executor,
  row: { template: string; recipient: string; data: string; organizationId: string | null; now: Date },
): Promise<{ id: string; message_id: string }> {
  return trx
    .insertInto('mail_outbox')
    .values({
      template: row.template,
      recipient: row.recipient,
      data: row.data,
      organization_id: row.organizationId,
      created_at: row.now,
      next_attempt_at: row.now,
    })
    .returning(['id', 'message_id'])
    .executeTakeFirstOrThrow()
}

/** Leases up to `limit` due rows (FOR UPDATE SKIP LOCKED: instances never claim the same row), oldest first. */
export async function claimMail(
  db: Executor,
  now: Date,
  leaseMs: number,
  limit: number,
): Promise<MailOutboxRow[]> {
  const rows = await db
    .updateTable('mail_outbox')
    .set((eb) => ({ lease_until: new Date(now.getTime() + leaseMs), attempts: eb('attempts', '+', 1) }))
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('mail_outbox')
        .select('id')
        .where('sent_at', 'is', null)
        .where('failed_at', 'is', null)
        .where('next_attempt_at', '<=', now)
        .where((w) => w.or([w('lease_until', 'is', null), w('lease_until', '<', now)]))
        .orderBy('id')
        .limit(limit)
        .forUpdate()
        .skipLocked(),
    )
    .returningAll()
    .execute()
  return rows.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1))
}

/** Sent: the data goes with the delivery, so a sent message keeps no link or personal data at rest. */
export async function markMailSent(db: Executor, id: string, sentAt: Date): Promise<void> {
  await db
    .updateTable('mail_outbox')
    .set({ sent_at: sentAt, lease_until: null, last_error: null, data: '{}' })
    .where('id', '=', id)
    .where('sent_at', 'is', null)
    .execute()
}

/** A failed attempt: retried at `nextAttemptAt`, or dead-lettered (`failedAt`, data dropped). */
export async function markMailFailed(
  db: Executor,
  row: MailOutboxRow,
  outcome: { lastError: string; now: Date } & ({ nextAttemptAt: Date } | { failedAt: Date }),
): Promise<void> {
  await db
    .updateTable('mail_outbox')
    .set({
      lease_until: null,
      last_error: outcome.lastError,
      ...('failedAt' in outcome
        ? { failed_at: outcome.failedAt, data: '{}' }
        : { next_attempt_at: outcome.nextAttemptAt }),
    })
    .where('id', '=', row.id)
    .where('sent_at', 'is', null)
    // Only while the lease is still ours; after it expired another worker owns the row.
    .where('lease_until', '=', row.lease_until ?? outcome.now)
    .execute()
}

/** Gives a claimed row back untouched (stopping, or too little lease left to send it safely). */
export async function releaseMail(db: Executor, row: MailOutboxRow): Promise<void> {
  await db
    .updateTable('mail_outbox')
    .set((eb) => ({ lease_until: null, attempts: eb('attempts', '-', 1) }))
    .where('id', '=', row.id)
    .where('sent_at', 'is', null)
    .where('lease_until', '=', row.lease_until ?? new Date())
    .execute()
}

/** Mail sent or given up before the cutoff; returns how many went. */
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
  return Number(result.numDeletedRows)
}
