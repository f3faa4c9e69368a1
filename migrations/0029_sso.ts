import { type Kysely, sql } from 'kysely'

// Organization single sign-on: an organization's OpenID Connect connections (the client secret
// stored sealed by the service's secret box, never readable at rest; at most one enabled per
// organization, so an address routes to one connection) and the email domains it claims, each
// with its DNS TXT challenge. A domain may be claimed by several organizations while pending, and
// verified for one only (a unique index over verified rows decides a race between two of them).

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('sso_connections')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('organization_id', 'uuid', (col) =>
      col.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('name', 'text', (col) => col.notNull().defaultTo(''))
    .addColumn('issuer', 'text', (col) => col.notNull())
    .addColumn('client_id', 'text', (col) => col.notNull())
    .addColumn('client_secret', 'text', (col) => col.notNull())
    .addColumn('enabled', 'boolean', (col) => col.notNull().defaultTo(true))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull())
    .execute()
  await db.schema
    .createIndex('sso_connections_organization_idx')
    .on('sso_connections')
    .columns(['organization_id', 'created_at'])
    .execute()
  await sql`
    create unique index sso_connections_one_enabled_key on sso_connections (organization_id)
    where enabled`.execute(db)

  await db.schema
    .createTable('sso_domains')
    .addColumn('organization_id', 'uuid', (col) =>
      col.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('domain', 'text', (col) => col.notNull())
    .addColumn('challenge', 'text', (col) => col.notNull())
    .addColumn('verified_at', 'timestamptz')
    .addColumn('checked_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addPrimaryKeyConstraint('sso_domains_pkey', ['organization_id', 'domain'])
    .execute()
  await sql`
    create unique index sso_domains_verified_key on sso_domains (domain)
    where verified_at is not null`.execute(db)
}

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('sso_domains').execute()
  await db.schema.dropTable('sso_connections').execute()
}
