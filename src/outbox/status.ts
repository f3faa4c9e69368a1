import { sql } from 'kysely'
import type { Executor } from '../db/schema.ts'

// What the outboxes hold, for the metrics and the CLI (src/outbox/engine.ts is the engine).

export type OutboxKindName = 'mail' | 'authz' | 'webhook'

export interface OutboxCounts {
  kind: OutboxKindName
  /** Waiting for delivery (due or backing off). */
  pending: number
  /** Given up: attempts exhausted, never deliverable, or rejected by the authorization model. */
  deadLetters: number
}

/** Every outbox's counts in one statement. */
export async function outboxCounts(db: Executor): Promise<OutboxCounts[]> {
  const { rows } = await sql<{ kind: OutboxKindName; pending: string; dead: string }>`
    select 'mail' as kind,
           count(*) filter (where sent_at is null and failed_at is null) as pending,
           count(*) filter (where failed_at is not null) as dead
      from mail_outbox
    union all
    select 'authz', count(*) filter (where processed_at is null), count(*) filter (where failed_at is not null)
      from authz_outbox
    union all
    select 'webhook', count(*) filter (where delivered_at is null and failed_at is null),
           count(*) filter (where failed_at is not null)
      from webhook_outbox`.execute(db)
  return rows.map((row) => ({ kind: row.kind, pending: Number(row.pending), deadLetters: Number(row.dead) }))
}

export interface DeadLetter {
  kind: OutboxKindName
  id: string
  /** The template (mail) or the tuple change (authz). */
  what: string
  attempts: number
  failedAt: Date
  lastError: string | null
}

/** The dead letters of every outbox, newest first. */
export async function listDeadLetters(db: Executor, limit: number): Promise<DeadLetter[]> {
  const mail = await db
    .selectFrom('mail_outbox')
    .select(['id', 'template', 'attempts', 'failed_at', 'last_error'])
    .where('failed_at', 'is not', null)
    .orderBy('failed_at', 'desc')
    .limit(limit)
    .execute()
  const authz = await db
    .selectFrom('authz_outbox')
    .select(['id', 'operation', 'subject', 'relation', 'object', 'attempts', 'failed_at', 'last_error'])
    .where('failed_at', 'is not', null)
    .orderBy('failed_at', 'desc')
    .limit(limit)
    .execute()
  const webhook = await db
    .selectFrom('webhook_outbox')
    .select(['id', 'event_type', 'endpoint_id', 'attempts', 'failed_at', 'last_error'])
    .where('failed_at', 'is not', null)
    .orderBy('failed_at', 'desc')
    .limit(limit)
    .execute()
  return [
    ...mail.map((r) => ({
      kind: 'mail' as const,
      id: r.id,
      what: r.template,
      attempts: r.attempts,
      failedAt: r.failed_at as Date,
      lastError: r.last_error,
    })),
    ...authz.map((r) => ({
      kind: 'authz' as const,
      id: r.id,
      what: `${r.operation} ${r.subject} ${r.relation} ${r.object}`,
      attempts: r.attempts,
      failedAt: r.failed_at as Date,
      lastError: r.last_error,
    })),
    ...webhook.map((r) => ({
      kind: 'webhook' as const,
      id: r.id,
      what: `${r.event_type} to webhook ${r.endpoint_id}`,
      attempts: r.attempts,
      failedAt: r.failed_at as Date,
      lastError: r.last_error,
    })),
  ]
    .sort((a, b) => b.failedAt.getTime() - a.failedAt.getTime())
    .slice(0, limit)
}
