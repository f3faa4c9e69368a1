import { sql } from 'kysely'
import type { Executor } from '../db/schema.ts'
import type { TenantScope } from '../db/tenant-scope.ts'

// What the outboxes hold, for the metrics and the CLI (src/outbox/engine.ts is the engine), and an
// organization's part of the mail and webhook outboxes for its admins (the authorization outbox
// belongs to no organization).

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
  /** The template (mail), the tuple change (authz) or the event type and endpoint (webhook). */
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
  return newestFirst(
    [
      ...mail.map(mailDeadLetter),
      ...authz.map((r) => ({
        kind: 'authz' as const,
        id: r.id,
        what: `${r.operation} ${r.subject} ${r.relation} ${r.object}`,
        attempts: r.attempts,
        failedAt: r.failed_at as Date,
        lastError: r.last_error,
      })),
      ...webhook.map(webhookDeadLetter),
    ],
    limit,
  )
}

const newestFirst = <T extends DeadLetter>(letters: T[], limit: number): T[] =>
  letters.sort((a, b) => b.failedAt.getTime() - a.failedAt.getTime()).slice(0, limit)

// A mail is named by its template only: its recipient and data stay in the outbox.
const mailDeadLetter = (r: {
  id: string
  template: string
  attempts: number
  failed_at: Date | null
  last_error: string | null
}) => ({
  kind: 'mail' as const,
  id: r.id,
  what: r.template,
  attempts: r.attempts,
  failedAt: r.failed_at as Date,
  lastError: r.last_error,
})

const webhookDeadLetter = (r: {
  id: string
  event_type: string
  endpoint_id: string
  attempts: number
  failed_at: Date | null
  last_error: string | null
}) => ({
  kind: 'webhook' as const,
  id: r.id,
  what: `${r.event_type} to webhook ${r.endpoint_id}`,
  attempts: r.attempts,
  failedAt: r.failed_at as Date,
  lastError: r.last_error,
})

export type OrganizationOutboxKind = 'mail' | 'webhook'

/** The organization's counts in its mail and webhook outboxes, in one statement. */
export async function organizationOutboxCounts(
  db: Executor,
  tenant: TenantScope,
): Promise<(OutboxCounts & { kind: OrganizationOutboxKind })[]> {
  const { rows } = await sql<{ kind: OrganizationOutboxKind; pending: string; dead: string }>`
    select 'mail' as kind,
           count(*) filter (where sent_at is null and failed_at is null) as pending,
           count(*) filter (where failed_at is not null) as dead
      from mail_outbox
     where organization_id = ${tenant.organizationId}
    union all
    select 'webhook', count(*) filter (where delivered_at is null and failed_at is null),
           count(*) filter (where failed_at is not null)
      from webhook_outbox
     where organization_id = ${tenant.organizationId}`.execute(db)
  return rows.map((row) => ({ kind: row.kind, pending: Number(row.pending), deadLetters: Number(row.dead) }))
}

/** The organization's mail and webhook dead letters, newest first. */
export async function organizationDeadLetters(
  db: Executor,
  tenant: TenantScope,
  limit: number,
): Promise<(DeadLetter & { kind: OrganizationOutboxKind })[]> {
  const mail = await db
    .selectFrom('mail_outbox')
    .select(['id', 'template', 'attempts', 'failed_at', 'last_error'])
    .where('organization_id', '=', tenant.organizationId)
    .where('failed_at', 'is not', null)
    .orderBy('failed_at', 'desc')
    .limit(limit)
    .execute()
  const webhook = await db
    .selectFrom('webhook_outbox')
    .select(['id', 'event_type', 'endpoint_id', 'attempts', 'failed_at', 'last_error'])
    .where('organization_id', '=', tenant.organizationId)
    .where('failed_at', 'is not', null)
    .orderBy('failed_at', 'desc')
    .limit(limit)
    .execute()
  return newestFirst([...mail.map(mailDeadLetter), ...webhook.map(webhookDeadLetter)], limit)
}
