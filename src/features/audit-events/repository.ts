import type { Selectable } from 'kysely'
import type { AuditEventTable, Executor } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'

export type AuditEventRow = Selectable<AuditEventTable>

export interface AuditFilter {
  type?: string | undefined
  actorType?: string | undefined
  actorId?: string | undefined
  subjectType?: string | undefined
  subjectId?: string | undefined
  from?: Date | undefined
  to?: Date | undefined
}

/** The organization's events matching the filter, newest first, below `beforeSequence`. */
export function listAuditEvents(
  db: Executor,
  tenant: TenantScope,
  filter: AuditFilter,
  page: { beforeSequence?: number | undefined; limit: number },
): Promise<AuditEventRow[]> {
  let query = db
    .selectFrom('audit_events')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('chain', '=', tenant.organizationId)
  query = narrow(query, filter)
  if (page.beforeSequence !== undefined) query = query.where('sequence', '<', page.beforeSequence as never)
  return query.orderBy('sequence', 'desc').limit(page.limit).execute()
}

/** A batch of the organization's events matching the filter, oldest first, after `afterSequence`. */
export function exportBatch(
  db: Executor,
  tenant: TenantScope,
  filter: AuditFilter,
  afterSequence: number,
  limit: number,
): Promise<AuditEventRow[]> {
  let query = db
    .selectFrom('audit_events')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('chain', '=', tenant.organizationId)
    .where('sequence', '>', afterSequence as never)
  query = narrow(query, filter)
  return query.orderBy('sequence').limit(limit).execute()
}

// biome-ignore lint/suspicious/noExplicitAny: the two queries differ only in their ordering
function narrow<Q extends { where: (...args: any[]) => Q }>(query: Q, filter: AuditFilter): Q {
  let narrowed = query
  if (filter.type) narrowed = narrowed.where('type', '=', filter.type)
  if (filter.actorType) narrowed = narrowed.where('actor_type', '=', filter.actorType)
  if (filter.actorId) narrowed = narrowed.where('actor_id', '=', filter.actorId)
  if (filter.subjectType) narrowed = narrowed.where('subject_type', '=', filter.subjectType)
  if (filter.subjectId) narrowed = narrowed.where('subject_id', '=', filter.subjectId)
  if (filter.from) narrowed = narrowed.where('occurred_at', '>=', filter.from)
  if (filter.to) narrowed = narrowed.where('occurred_at', '<', filter.to)
  return narrowed
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
