import { type Kysely, sql } from 'kysely'

// Named leases for work that one instance at a time must do in order (the authorization outbox:
// a tuple's write and its later delete must reach the server in that order).

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('worker_leases')
    .addColumn('name', 'text', (col) => col.primaryKey())
    .addColumn('holder', 'text', (col) => col.notNull())
    .addColumn('lease_until', 'timestamptz', (col) => col.notNull())
    .execute()
  await sql`insert into worker_leases (name, holder, lease_until) values ('authz_outbox', '', 'epoch')`.execute(
    db,
  )
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('worker_leases').execute()
}
