import { type CompiledQuery, type RawBuilder, type Selectable, sql } from 'kysely'
import type { RowsRead } from '../../authz/tuple-store.ts'
import { type CursorKey, cursorCodec } from '../../db/paging.ts'
import type { Executor, Tx } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import type { PurchaseRequestBody } from './schemas.ts'
import type { PurchaseRequestEventTable, PurchaseRequestStatus } from './tables.ts'

// Purchase requests and their audit rows. Every statement names the tenant's organization: an id
// alone, even one an authorization tuple relates to the caller, never reaches another
// organization's row.

export type PurchaseRequestEventRow = Selectable<PurchaseRequestEventTable>

/**
 * A purchase request as the API shows it, and as it is read: camelCase, the timestamps as the text
 * Date.toISOString() writes for them, formatted by the database, so that no Date is parsed and
 * printed again for a value that is only serialised.
 */
export type PurchaseRequestView = PurchaseRequestBody

/** The list's cursors: a position in its order (created_at desc, id desc), the last row of a page. */
export const PurchaseRequestCursor = cursorCodec('purchase-requests', { createdAt: 'instant', id: 'uuid' })
export type PageKey = CursorKey<typeof PurchaseRequestCursor>

/**
 * A timestamptz column as Date.toISOString() writes it: UTC, to the millisecond, the microseconds
 * cut off (to_char's MS truncates, as pg does when it parses the value into a Date).
 */
const isoText = (column: string) =>
  sql.raw(`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`)

/** The select list of a PurchaseRequestView. */
const VIEW_COLUMNS = sql`id, organization_id as "organizationId", created_by as "createdBy", title, status, ${isoText('created_at')} as "createdAt", ${isoText('updated_at')} as "updatedAt"`

const NOTHING = sql``

/**
 * A select written as SQL text with parameters (no query builder built and compiled per request;
 * its text is the same on every call, so the connection keeps it prepared), run alone or composed
 * as a subquery into the statement of a permission check (RowsRead, findWithLookups).
 */
class SqlRead<Row> implements RowsRead<Row> {
  readonly #db: Executor
  readonly #query: RawBuilder<Row>

  constructor(db: Executor, query: RawBuilder<Row>) {
    this.#db = db
    this.#query = query
  }

  compile(): CompiledQuery<Row> {
    return this.#query.compile(this.#db)
  }

  async execute(): Promise<Row[]> {
    return (await this.#query.execute(this.#db)).rows
  }
}

/**
 * Inserts a purchase request with `alongside` (a data-modifying part: the audit event) in the same
 * statement.
 */
export async function insertPurchaseRequest(
  trx: Tx,
  tenant: TenantScope,
  values: { id: string; createdBy: string; title: string; status: PurchaseRequestStatus; now: Date },
  alongside: RawBuilder<unknown>,
): Promise<void> {
  await trx
    .with('alongside', () => sql`(${alongside})`)
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
    .execute()
}

/** The select of one of the organization's purchase requests, run alone or along with a permission check. */
export function purchaseRequestQuery(
  db: Executor,
  tenant: TenantScope,
  id: string,
): RowsRead<PurchaseRequestView> {
  return new SqlRead(
    db,
    sql<PurchaseRequestView>`select ${VIEW_COLUMNS} from purchase_requests where organization_id = ${tenant.organizationId} and id = ${id}`,
  )
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
 * Moves a request from one status to another, guarded on the current status (of concurrent movers
 * exactly one gets the row back), adds the move to its history and runs `alongside` (a
 * data-modifying part: the audit event, given the condition "the row moved"), in one statement.
 * Undefined when the status had already moved.
 */
export async function movePurchaseRequest(
  trx: Tx,
  tenant: TenantScope,
  move: {
    id: string
    from: PurchaseRequestStatus
    to: PurchaseRequestStatus
    action: string
    actorId: string
    now: Date
  },
  alongside: (moved: RawBuilder<unknown>) => RawBuilder<unknown>,
): Promise<PurchaseRequestView | undefined> {
  const { rows } = await sql<PurchaseRequestView>`
    with moved as (
      update purchase_requests set status = ${move.to}, updated_at = ${move.now}
      where organization_id = ${tenant.organizationId} and id = ${move.id} and status = ${move.from}
      returning ${VIEW_COLUMNS}
    ), recorded as (
      insert into purchase_request_events (organization_id, purchase_request_id, action, from_status, to_status, actor_id, occurred_at)
      select "organizationId", id, ${move.action}, ${move.from}, ${move.to}, ${move.actorId}, ${move.now} from moved
    ), alongside as (${alongside(sql`exists (select 1 from moved)`)})
    select * from moved`.execute(trx)
  return rows[0]
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
): RowsRead<PurchaseRequestView> {
  const { status, after, limit } = options
  const ofStatus = status ? sql` and status = ${status}` : NOTHING
  const afterKey = after ? sql` and (created_at, id) < (${after.createdAt}, ${after.id})` : NOTHING
  return new SqlRead(
    db,
    sql<PurchaseRequestView>`select ${VIEW_COLUMNS} from purchase_requests where organization_id = ${tenant.organizationId}${ofStatus}${afterKey} order by created_at desc, id desc limit ${limit}`,
  )
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
