import type { Selectable } from 'kysely'
import type { Executor, Tx } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import type { PurchaseRequestEventTable, PurchaseRequestStatus, PurchaseRequestTable } from './tables.ts'

// Purchase requests and their audit rows. Every statement names the tenant's organization: an id
// alone, even one an authorization tuple relates to the caller, never reaches another
// organization's row.

export type PurchaseRequestRow = Selectable<PurchaseRequestTable>
export type PurchaseRequestEventRow = Selectable<PurchaseRequestEventTable>

/** A position in the list's order (created_at desc, id desc): the last row of a page. */
export interface PageKey {
  createdAt: Date
  id: string
}

export function insertPurchaseRequest(
  trx: Tx,
  tenant: TenantScope,
  values: { id: string; createdBy: string; title: string; status: PurchaseRequestStatus; now: Date },
): Promise<PurchaseRequestRow> {
  return trx
    .insertInto('purchase_requests')
    .values({
      id: values.id,
      organization_id: tenant.organizationId,
      created_by: values.createdBy,
      title: values.title,
      status: values.status,
      created_at: values.now,
      updated_at: values.now,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

/** The select of one of the organization's purchase requests, run alone or along with a permission check. */
export function purchaseRequestQuery(db: Executor, tenant: TenantScope, id: string) {
  return db
    .selectFrom('purchase_requests')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
}

/**
 * Whether a purchase request with this id exists outside the organization (anywhere, for a
 * principal without one): what tells another organization's request (403) from an unknown id (404)
 * without reading any of it.
 */
export async function purchaseRequestExistsOutside(
  db: Executor,
  tenant: TenantScope | null,
  id: string,
): Promise<boolean> {
  let query = db.selectFrom('purchase_requests').select('id').where('id', '=', id)
  if (tenant) query = query.where('organization_id', '<>', tenant.organizationId)
  return (await query.executeTakeFirst()) !== undefined
}

/**
 * Moves a request from one status to another, guarded on the current status: of concurrent
 * movers exactly one gets the row back.
 */
export function updatePurchaseRequestStatus(
  trx: Tx,
  tenant: TenantScope,
  where: { id: string; from: PurchaseRequestStatus },
  to: PurchaseRequestStatus,
  now: Date,
): Promise<PurchaseRequestRow | undefined> {
  return trx
    .updateTable('purchase_requests')
    .set({ status: to, updated_at: now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', where.id)
    .where('status', '=', where.from)
    .returningAll()
    .executeTakeFirst()
}

export async function insertPurchaseRequestEvent(
  trx: Tx,
  tenant: TenantScope,
  values: Omit<PurchaseRequestEventRow, 'id' | 'organization_id'>,
): Promise<void> {
  await trx
    .insertInto('purchase_request_events')
    .values({ ...values, organization_id: tenant.organizationId })
    .execute()
}

/**
 * A page of the organization's purchase requests, newest first; a select, run along with the
 * membership check. Keyset paging (after created_at, id): the page after `after` starts from an
 * index position, so its cost does not grow with the page's depth.
 */
export function purchaseRequestsQuery(
  db: Executor,
  tenant: TenantScope,
  options: { status?: PurchaseRequestStatus | undefined; after?: PageKey | undefined; limit: number },
) {
  let query = db
    .selectFrom('purchase_requests')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
  if (options.status) query = query.where('status', '=', options.status)
  if (options.after) {
    const { createdAt, id } = options.after
    query = query.where((eb) => eb(eb.refTuple('created_at', 'id'), '<', eb.tuple(createdAt, id)))
  }
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(options.limit)
}

export function listPurchaseRequestEvents(
  db: Executor,
  tenant: TenantScope,
  purchaseRequestId: string,
): Promise<PurchaseRequestEventRow[]> {
  return db
    .selectFrom('purchase_request_events')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('purchase_request_id', '=', purchaseRequestId)
    .orderBy('id')
    .execute()
}
