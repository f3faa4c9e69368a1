import { type Selectable, sql } from 'kysely'
import { type CursorKey, cursorCodec } from '../../db/paging.ts'
import type { Executor, Tx } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import type {
  AttemptOutcome,
  DisabledReason,
  WebhookAttemptTable,
  WebhookEndpointTable,
  WebhookOutboxTable,
} from './tables.ts'

// The webhooks' statements: endpoints (always within the caller's organization), the outbox the
// delivery worker claims from, and the attempts it records.

export type EndpointRow = Selectable<WebhookEndpointTable>
export type OutboxRow = Selectable<WebhookOutboxTable>
export type AttemptRow = Selectable<WebhookAttemptTable>

export async function countEndpoints(trx: Executor, tenant: TenantScope): Promise<number> {
  const row = await trx
    .selectFrom('webhook_endpoints')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('organization_id', '=', tenant.organizationId)
    .executeTakeFirstOrThrow()
  return Number(row.count)
}

export async function insertEndpoint(
  trx: Executor,
  tenant: TenantScope,
  values: {
    id: string
    url: string
    description: string
    eventTypes: string[]
    enabled: boolean
    secret: string
    now: Date
  },
): Promise<EndpointRow> {
  return trx
    .insertInto('webhook_endpoints')
    .values({
      id: values.id,
      organization_id: tenant.organizationId,
      url: values.url,
      description: values.description,
      event_types: values.eventTypes,
      enabled: values.enabled,
      secret: values.secret,
      created_at: values.now,
      updated_at: values.now,
      // It gets the events written from now on (webhookFanOut), its own creation not among them.
      audit_position: sql`(select case when is_called then last_value else 0 end from audit_events_position_seq)`,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

export async function listEndpoints(db: Executor, tenant: TenantScope): Promise<EndpointRow[]> {
  return db
    .selectFrom('webhook_endpoints')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .orderBy('created_at')
    .orderBy('id')
    .execute()
}

export async function findEndpoint(
  db: Executor,
  tenant: TenantScope,
  id: string,
  options: { lock?: boolean } = {},
): Promise<EndpointRow | undefined> {
  let query = db
    .selectFrom('webhook_endpoints')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
  if (options.lock) query = query.forUpdate()
  return query.executeTakeFirst()
}

export async function updateEndpoint(
  trx: Tx,
  tenant: TenantScope,
  id: string,
  changes: Partial<{
    url: string
    description: string
    event_types: string[]
    enabled: boolean
    disabled_reason: DisabledReason | null
    consecutive_failures: number
    failing_since: Date | null
    secret: string
    previous_secret: string | null
    previous_secret_expires_at: Date | null
  }> & { updated_at: Date },
): Promise<EndpointRow> {
  return trx
    .updateTable('webhook_endpoints')
    .set(changes)
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow()
}

export async function deleteEndpoint(trx: Tx, tenant: TenantScope, id: string): Promise<boolean> {
  const result = await trx
    .deleteFrom('webhook_endpoints')
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .executeTakeFirst()
  return result.numDeletedRows > 0n
}

/** Queues one message for one endpoint (a test ping). */
export async function queueMessage(
  trx: Tx,
  tenant: TenantScope,
  values: { endpointId: string; eventType: string; payload: string; now: Date },
): Promise<{ message_id: string }> {
  return trx
    .insertInto('webhook_outbox')
    .values({
      endpoint_id: values.endpointId,
      organization_id: tenant.organizationId,
      event_type: values.eventType,
      payload: values.payload,
      created_at: values.now,
      next_attempt_at: values.now,
    })
    .returning('message_id')
    .executeTakeFirstOrThrow()
}

/** The attempts list's cursors: a position in its order (newest first), an attempt's id. */
export const AttemptCursor = cursorCodec('webhook-deliveries', { id: 'serial' })
export type AttemptPageKey = CursorKey<typeof AttemptCursor>

/** An endpoint's attempts, newest first, a page at a time after `after` (older ones). */
export async function listAttempts(
  db: Executor,
  tenant: TenantScope,
  endpointId: string,
  page: { limit: number; after?: AttemptPageKey | undefined },
): Promise<AttemptRow[]> {
  let query = db
    .selectFrom('webhook_attempts')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('endpoint_id', '=', endpointId)
  if (page.after !== undefined) query = query.where('id', '<', page.after.id)
  return query.orderBy('id', 'desc').limit(page.limit).execute()
}

// The delivery worker's statements: they run outside any request, on rows every organization owns.

/** Leases up to `limit` due messages (FOR UPDATE SKIP LOCKED: instances never claim the same one). */
export async function claimMessages(
  db: Executor,
  now: Date,
  leaseMs: number,
  limit: number,
): Promise<OutboxRow[]> {
  const rows = await db
    .updateTable('webhook_outbox')
    .set((eb) => ({ lease_until: new Date(now.getTime() + leaseMs), attempts: eb('attempts', '+', 1) }))
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('webhook_outbox')
        .select('id')
        .where('delivered_at', 'is', null)
        .where('failed_at', 'is', null)
        .where('next_attempt_at', '<=', now)
        .where((w) => w.or([w('lease_until', 'is', null), w('lease_until', '<', now)]))
        .orderBy('next_attempt_at')
        .limit(limit)
        .forUpdate()
        .skipLocked(),
    )
    .returningAll()
    .execute()
  return rows.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1))
}

/** The endpoints the claimed messages go to (deleted ones are absent: their messages went with them). */
export async function endpointsByIds(db: Executor, ids: string[]): Promise<EndpointRow[]> {
  if (ids.length === 0) return []
  return db.selectFrom('webhook_endpoints').selectAll().where('id', 'in', ids).execute()
}

/** An endpoint's failure state, locked for the rest of the transaction (the attempt's outcome depends on it). */
export async function lockEndpointState(
  trx: Tx,
  endpointId: string,
): Promise<{ enabled: boolean; failures: number; failingSince: Date | null } | undefined> {
  const row = await trx
    .selectFrom('webhook_endpoints')
    .select(['enabled', 'consecutive_failures', 'failing_since'])
    .where('id', '=', endpointId)
    .forUpdate()
    .executeTakeFirst()
  return row
    ? {
        enabled: row.enabled,
        failures: row.consecutive_failures,
        failingSince: row.failing_since as Date | null,
      }
    : undefined
}

export interface AttemptRecord {
  message: OutboxRow
  attemptedAt: Date
  statusCode: number | null
  durationMs: number
  error: string | null
  outcome: AttemptOutcome
  /** When the next attempt is due (outcome `retrying`). */
  nextAttemptAt?: Date
  /** What the attempt does to its endpoint: nothing (it was disabled), a success, or a failure. */
  endpoint: { kind: 'none' } | { kind: 'succeeded' } | { kind: 'failed'; disable: DisabledReason | null }
}

/**
 * Records an attempt in one statement: the message's new state, the attempt row and the endpoint's
 * failure count (reset by a success; a failure that disables it sets `enabled` false with the
 * reason), all only while the message's lease is still the claimer's. Returns whether it was.
 */
export async function recordAttempt(db: Executor, record: AttemptRecord): Promise<boolean> {
  const { message } = record
  const delivered = record.outcome === 'delivered'
  const finished = record.outcome === 'dead_letter' || record.outcome === 'endpoint_disabled'
  const change = record.endpoint
  const at = record.attemptedAt
  const endpoint =
    change.kind === 'none'
      ? sql`select 1`
      : sql`update webhook_endpoints set ${
          change.kind === 'succeeded'
            ? sql`consecutive_failures = 0, failing_since = null`
            : sql`consecutive_failures = consecutive_failures + 1, failing_since = coalesce(failing_since, ${at})${
                change.disable === null
                  ? sql``
                  : sql`, enabled = false, disabled_reason = ${change.disable}, updated_at = ${at}`
              }`
        }
        where id = ${message.endpoint_id} and exists (select 1 from message)`
  const { rows } = await sql<{ id: string }>`
    with message as (
      update webhook_outbox set
        lease_until = null,
        last_error = ${record.error},
        delivered_at = ${delivered ? record.attemptedAt : null},
        failed_at = ${finished ? record.attemptedAt : null},
        next_attempt_at = ${record.nextAttemptAt ?? message.next_attempt_at}
      where id = ${message.id} and delivered_at is null and failed_at is null
        and lease_until = ${message.lease_until}
      returning id
    ), attempt as (
      insert into webhook_attempts (endpoint_id, organization_id, message_id, event_type, attempt,
        attempted_at, status_code, duration_ms, error, outcome)
      select ${message.endpoint_id}, ${message.organization_id}, ${message.message_id}, ${message.event_type},
        ${message.attempts}, ${record.attemptedAt}, ${record.statusCode}, ${record.durationMs}, ${record.error},
        ${record.outcome}
      from message
    ), endpoint as (${endpoint})
    select id from message`.execute(db)
  return rows.length > 0
}

/** Gives a claimed message back untouched (stopping). */
export async function releaseMessage(db: Executor, message: OutboxRow): Promise<void> {
  await db
    .updateTable('webhook_outbox')
    .set((eb) => ({ lease_until: null, attempts: eb('attempts', '-', 1) }))
    .where('id', '=', message.id)
    .where('delivered_at', 'is', null)
    .where('lease_until', '=', message.lease_until ?? new Date())
    .execute()
}

/** The organization's admins' addresses, for the notice that an endpoint was disabled. */
export async function activeAdminEmails(db: Executor, organizationId: string): Promise<string[]> {
  const rows = await db
    .selectFrom('accounts')
    .select('email')
    .where('organization_id', '=', organizationId)
    .where('role', '=', 'admin')
    .where('active', '=', true)
    .where('deactivated_at', 'is', null)
    .execute()
  return rows.map((row) => row.email)
}

/** Delivered or dead-lettered messages and attempts older than the cutoff (retention). */
export async function deleteOldDeliveries(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const messages = await db
    .deleteFrom('webhook_outbox')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('webhook_outbox')
        .select('id')
        .where((w) => w.or([w('delivered_at', '<', cutoff), w('failed_at', '<', cutoff)]))
        .limit(limit),
    )
    .executeTakeFirst()
  const attempts = await db
    .deleteFrom('webhook_attempts')
    .where('id', 'in', (eb) =>
      eb.selectFrom('webhook_attempts').select('id').where('attempted_at', '<', cutoff).limit(limit),
    )
    .executeTakeFirst()
  return Number(messages.numDeletedRows) + Number(attempts.numDeletedRows)
}
