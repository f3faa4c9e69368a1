import { type Kysely, sql } from 'kysely'

// Service accounts (client credentials), API keys, and the outbox of authorization tuple changes
// (written in the same transaction as the change that causes them; delivered by the authorization
// feature). Only SHA-256 hashes of secrets and keys are stored.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('service_accounts')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('client_id', 'text', (col) =>
      col.notNull().unique().check(sql`char_length(client_id) between 3 and 100`),
    )
    .addColumn('secret_hash', 'text', (col) => col.notNull())
    .addColumn('scopes', sql`text[]`, (col) => col.notNull().defaultTo(sql`'{}'`))
    .addColumn('description', 'text', (col) => col.notNull().defaultTo(''))
    .addColumn('active', 'boolean', (col) => col.notNull().defaultTo(true))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('disabled_at', 'timestamptz')
    .execute()

  await db.schema
    .createTable('api_keys')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('organization_id', 'uuid', (col) => col.notNull().references('organizations.id'))
    .addColumn('key_prefix', 'text', (col) => col.notNull())
    .addColumn('key_hash', 'text', (col) => col.notNull().unique())
    .addColumn('scopes', sql`text[]`, (col) => col.notNull().defaultTo(sql`'{}'`))
    .addColumn('description', 'text', (col) => col.notNull().defaultTo(''))
    .addColumn('expires_at', 'timestamptz')
    .addColumn('revoked_at', 'timestamptz')
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .execute()
  await db.schema
    .createIndex('api_keys_organization_idx')
    .on('api_keys')
    .columns(['organization_id', 'created_at'])
    .execute()

  await db.schema
    .createTable('authz_outbox')
    .addColumn('id', 'bigserial', (col) => col.primaryKey())
    .addColumn('operation', 'text', (col) => col.notNull().check(sql`operation in ('write', 'delete')`))
    .addColumn('subject', 'text', (col) => col.notNull())
    .addColumn('relation', 'text', (col) => col.notNull())
    .addColumn('object', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('processed_at', 'timestamptz')
    .addColumn('last_error', 'text')
    .execute()
  await sql`create index authz_outbox_pending_idx on authz_outbox (next_attempt_at, id) where processed_at is null`.execute(
    db,
  )
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('authz_outbox').execute()
  await db.schema.dropTable('api_keys').execute()
  await db.schema.dropTable('service_accounts').execute()
}
