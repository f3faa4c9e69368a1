import { type Kysely, sql } from 'kysely'

// File metadata (spec 2.10, 4.3): the bytes live in the object store under `object_key`, which the
// service derives from ids only. Lifecycle: PENDING at initiate, CONFIRMED at confirm (size
// recorded), REJECTED when confirm found the object over the size limit (the object is deleted).
// The index serves a resource's listing, filtered by organization first like every tenant query.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('files')
    .addColumn('id', 'uuid', (col) => col.primaryKey())
    .addColumn('organization_id', 'uuid', (col) => col.notNull().references('organizations.id'))
    .addColumn('resource_type', 'text', (col) =>
      col.notNull().check(sql`resource_type ~ '^[a-z][a-z0-9_]{0,63}$'`),
    )
    .addColumn('resource_id', 'text', (col) =>
      col.notNull().check(sql`char_length(resource_id) between 1 and 256`),
    )
    .addColumn('object_key', 'text', (col) => col.notNull().unique())
    .addColumn('original_file_name', 'text', (col) =>
      col.notNull().check(sql`char_length(original_file_name) between 1 and 255`),
    )
    .addColumn('content_type', 'text', (col) => col.notNull())
    .addColumn('status', 'text', (col) =>
      col.notNull().check(sql`status in ('PENDING', 'CONFIRMED', 'REJECTED')`),
    )
    .addColumn('size_bytes', 'bigint', (col) => col.check(sql`size_bytes >= 0`))
    .addColumn('created_by', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('confirmed_at', 'timestamptz')
    .addCheckConstraint(
      'files_confirmed_has_size',
      sql`status <> 'CONFIRMED' or (size_bytes is not null and confirmed_at is not null)`,
    )
    .execute()
  await db.schema
    .createIndex('files_resource_idx')
    .on('files')
    .columns(['organization_id', 'resource_type', 'resource_id', 'status'])
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('files').execute()
}
