import { type Kysely, sql } from 'kysely'

// The example resource: purchase requests and their audit trail (spec 2.9, 3.1). Every index on
// these tenant-owned tables leads with the organization id; the list's keyset order is
// (created_at desc, id desc).

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('purchase_requests')
    .addColumn('id', sql`char(36)`, (col) => col.primaryKey()) // a 36-character text UUID (spec 2.9)
    .addColumn('organization_id', 'uuid', (col) => col.notNull().references('organizations.id'))
    .addColumn('created_by', 'text', (col) => col.notNull())
    .addColumn('title', 'text', (col) => col.notNull().check(sql`char_length(title) between 1 and 255`))
    .addColumn('status', 'text', (col) =>
      col.notNull().check(sql`status in ('DRAFT', 'SUBMITTED', 'APPROVED')`),
    )
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull())
    .execute()
  await sql`create index purchase_requests_page_idx on purchase_requests (organization_id, created_at desc, id desc)`.execute(
    db,
  )
  await sql`create index purchase_requests_status_page_idx on purchase_requests (organization_id, status, created_at desc, id desc)`.execute(
    db,
  )

  await db.schema
    .createTable('purchase_request_events')
    .addColumn('id', 'bigserial', (col) => col.primaryKey())
    .addColumn('organization_id', 'uuid', (col) => col.notNull())
    .addColumn('purchase_request_id', sql`char(36)`, (col) =>
      col.notNull().references('purchase_requests.id').onDelete('cascade'),
    )
    .addColumn('action', 'text', (col) => col.notNull())
    .addColumn('from_status', 'text', (col) => col.notNull())
    .addColumn('to_status', 'text', (col) => col.notNull())
    .addColumn('actor_id', 'text', (col) => col.notNull())
    .addColumn('occurred_at', 'timestamptz', (col) => col.notNull())
    .execute()
  await db.schema
    .createIndex('purchase_request_events_request_idx')
    .on('purchase_request_events')
    .columns(['organization_id', 'purchase_request_id', 'id'])
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('purchase_request_events').execute()
  await db.schema.dropTable('purchase_requests').execute()
}
