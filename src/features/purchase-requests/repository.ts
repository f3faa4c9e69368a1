import type { Selectable } from 'kysely'
import type {
  Executor,
  PurchaseRequestEventTable,
  PurchaseRequestStatus,
  PurchaseRequestTable,
  Tx,
} from '../../db/schema.ts'

export type PurchaseRequestRow = Selectable<PurchaseRequestTable>
export type PurchaseRequestEventRow = Selectable<PurchaseRequestEventTable>

/** A position in the list's order (created_at desc, id desc): the last row of a page. */
export interface PageKey {
  createdAt: Date
  id: string
}

export function insertPurchaseRequest(
  trx: Tx,
  values: {
    id: string
    organizationId: string
    createdBy: string
    title: string
    status: PurchaseRequestStatus
    now: Date
  },
): Promise<PurchaseRequestRow> {
  return trx
    .insertInto('purchase_requests')
    .values({
      id: values.id,
      organization_id: values.organizationId,
      created_by: values.createdBy,
      title: values.title,
      status: values.status,
      created_at: values.now,
      updated_at: values.now,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

/** By id in any organization: the caller tells "unknown" (404) from "not yours" (403). */
/** The select of one purchase request, run alone or along with a permission check. */
export function purchaseRequestQuery(db: Executor, id: string) {
  return db.selectFrom('purchase_requests').selectAll().where('id', '=', id)
}

/**
 * Moves a request from one status to another, guarded on the current status: of concurrent
 * movers exactly one gets the row back.
 */
export function updatePurchaseRequestStatus(
  trx: Tx,
  where: { organizationId: string; id: string; from: PurchaseRequestStatus },
  to: PurchaseRequestStatus,
  now: Date,
): Promise<PurchaseRequestRow | undefined> {
  return trx
    .updateTable('purchase_requests')
    .set({ status: to, updated_at: now })
    .where('organization_id', '=', where.organizationId)
    .where('id', '=', where.id)
    .where('status', '=', where.from)
    .returningAll()
    .executeTakeFirst()
}

export async function insertPurchaseRequestEvent(
  trx: Tx,
  values: Omit<PurchaseRequestEventRow, 'id'>,
): Promise<void> {
  await trx.insertInto('purchase_request_events').values(values).execute()
}

/**
 * One page of an organization's requests, newest first. Keyset paging: the page after `after`
 * starts from an index position, so its cost does not grow with the page's depth.
 */
/**
 * A page of an organization's purchase requests, newest first (keyset: after created_at, id); a
 * select, run along with the membership check.
 */
export function purchaseRequestsQuery(
  db: Executor,
  organizationId: string,
  options: { status?: PurchaseRequestStatus | undefined; after?: PageKey | undefined; limit: number },
) {
  let query = db.selectFrom('purchase_requests').selectAll().where('organization_id', '=', organizationId)
  if (options.status) query = query.where('status', '=', options.status)
  if (options.after) {
    const { createdAt, id } = options.after
    query = query.where((eb) => eb(eb.refTuple('created_at', 'id'), '<', eb.tuple(createdAt, id)))
  }
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(options.limit)
}

export function listPurchaseRequestEvents(
  db: Executor,
  organizationId: string,
  purchaseRequestId: string,
): Promise<PurchaseRequestEventRow[]> {
  return db
    .selectFrom('purchase_request_events')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where('purchase_request_id', '=', purchaseRequestId)
    .orderBy('id')
    .execute()
}
