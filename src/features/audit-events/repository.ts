import { type Selectable, sql } from 'kysely'
import { type CursorKey, cursorCodec } from '../../db/paging.ts'
import type { AuditEventTable, Executor } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'

/** A chained event's row (what the list and the export read). */
export type AuditEventRow = Selectable<AuditEventTable> & {
  sequence: string
  key_id: string
  previous_hash: string
  hash: string
}

export interface AuditFilter {
  type?: string | undefined
  actorType?: string | undefined
  actorId?: string | undefined
  subjectType?: string | undefined
  subjectId?: string | undefined
  from?: Date | undefined
  to?: Date | undefined
}

/** The list's cursors: a position in its order, an event's sequence in its organization's chain. */
export const AuditEventCursor = cursorCodec('audit-events', { sequence: 'serial' })
export type AuditPageKey = CursorKey<typeof AuditEventCursor>

/** The organization's events matching the filter, newest first, after `after` (older ones). */
export function listAuditEvents(
  db: Executor,
  tenant: TenantScope,
  filter: AuditFilter,
  page: { after?: AuditPageKey | undefined; limit: number },
): Promise<AuditEventRow[]> {
  let query = ofOrganization(db, tenant, filter)
  if (page.after !== undefined) query = query.where('sequence', '<', page.after.sequence)
  return query.orderBy('sequence', 'desc').limit(page.limit).execute()
}

/**
 * A batch of the organization's events matching the filter, oldest first, after `afterSequence`,
 * each already rendered by PostgreSQL as the JSON text of an AuditEvent (the shape `toAuditEvent`
 * gives a row), so an export of any size builds no object per event. The rows come in an array of
 * their own: the driver's is emptied (below).
 */
export async function exportBatch(
  db: Executor,
  tenant: TenantScope,
  filter: AuditFilter,
  afterSequence: number,
  limit: number,
): Promise<{ sequence: string; line: string }[]> {
  // The batch is chosen first and rendered after: whatever plan PostgreSQL picks for the choice,
  // only the rows of the batch are turned into JSON.
  const batch = ofOrganization(db, tenant, filter)
    .where('sequence', '>', afterSequence as never)
    .orderBy('sequence')
    .limit(limit)
  const rows = await db
    .selectFrom(batch.as('e'))
    .select([
      'e.sequence',
      sql<string>`json_build_object(
        'id', e.id, 'sequence', e.sequence,
        'occurredAt', to_char(e.occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'type', e.type, 'actor', json_build_object('type', e.actor_type, 'id', e.actor_id),
        'subject', case when e.subject_type is not null and e.subject_id is not null
          then json_build_object('type', e.subject_type, 'id', e.subject_id) end,
        'ipAddress', e.ip_address, 'userAgent', e.user_agent, 'requestId', e.request_id, 'data', e.data,
        'previousHash', e.previous_hash, 'hash', e.hash)::text`.as('line'),
    ])
    .orderBy('e.sequence')
    .execute()
  // Moved out of pg's result array (Kysely returns that array itself), which is left empty. Awaited
  // through pg's promise, a finished query's result array stays reachable for the young
  // generation's collections until the next full collection: left full, its rows survived two
  // scavenges and were promoted, every line of every batch (about 0.7 kB an event), and the
  // service's RSS grew with the export (43-62 MB for 200,000 events). Emptied, it holds nothing and
  // each line dies young once written (test/bench/audit-export.ts has the figures).
  return rows.splice(0)
}

/** The organization's events (its own chain) that match the filter. */
function ofOrganization(db: Executor, tenant: TenantScope, filter: AuditFilter) {
  let query = db
    .selectFrom('audit_events')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('chain', '=', tenant.organizationId)
    // Chained events only: one written moments ago shows once the chainer has given it its place.
    .where('sequence', 'is not', null)
    .$narrowType<{ sequence: string; key_id: string; previous_hash: string; hash: string }>()
  if (filter.type) query = query.where('type', '=', filter.type)
  if (filter.actorType)
    query = query.where('actor_type', '=', filter.actorType as AuditEventTable['actor_type'])
  if (filter.actorId) query = query.where('actor_id', '=', filter.actorId)
  if (filter.subjectType) query = query.where('subject_type', '=', filter.subjectType)
  if (filter.subjectId) query = query.where('subject_id', '=', filter.subjectId)
  if (filter.from) query = query.where('occurred_at', '>=', filter.from)
  if (filter.to) query = query.where('occurred_at', '<', filter.to)
  return query
}

/** The organization chain's last sequence and hash, or null before its first event. */
export async function chainHead(
  db: Executor,
  tenant: TenantScope,
): Promise<{ sequence: number; hash: string } | null> {
  const row = await db
    .selectFrom('audit_chain_heads')
    .select(['sequence', 'hash'])
    .where('chain', '=', tenant.organizationId)
    .executeTakeFirst()
  return row && Number(row.sequence) > 0 ? { sequence: Number(row.sequence), hash: row.hash } : null
}
