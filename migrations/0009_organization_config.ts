import { type Kysely, sql } from 'kysely'

// Per-organization runtime configuration (spec 2.11, 4.4): one text value per key, changed at
// runtime. The primary key leads with the organization, so an organization's entries are one
// index range. The checks repeat the service's rules, so no other writer can store what the API
// would refuse.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('organization_config')
    .addColumn('organization_id', 'uuid', (col) => col.notNull().references('organizations.id'))
    .addColumn('key', 'text', (col) => col.notNull().check(sql`key ~ '^[a-z0-9][a-z0-9._-]{0,127}$'`))
    .addColumn('value', 'text', (col) => col.notNull().check(sql`octet_length(value) <= 65536`))
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('organization_config_pkey', ['organization_id', 'key'])
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('organization_config').execute()
}
