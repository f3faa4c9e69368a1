import { type Kysely, sql } from 'kysely'

// Authentication accounts, sessions and refresh tokens, and the shared rate-limit counters.
// Sessions and tokens link to users by UUID value only: a deployment that supplies its own
// credential authenticator has users that are not rows of `accounts`.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('accounts')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('organization_id', 'uuid', (col) => col.notNull().references('organizations.id'))
    .addColumn('email', 'text', (col) => col.notNull().check(sql`char_length(email) between 3 and 320`))
    .addColumn('password_hash', 'text', (col) => col.notNull())
    .addColumn('role', 'text', (col) => col.notNull().check(sql`role in ('admin', 'member')`))
    .addColumn('active', 'boolean', (col) => col.notNull().defaultTo(true))
    .addColumn('failed_attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('locked_until', 'timestamptz')
    .addColumn('otp_secret', 'text') // encrypted at rest
    .addColumn('otp_enabled', 'boolean', (col) => col.notNull().defaultTo(false))
    .addColumn('otp_last_step', 'bigint') // last accepted TOTP time step, against replay
    .addColumn('session_version', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .execute()
  await sql`create unique index accounts_email_key on accounts (lower(email))`.execute(db)
  await db.schema
    .createIndex('accounts_organization_idx')
    .on('accounts')
    .columns(['organization_id', 'role'])
    .execute()

  await db.schema
    .createTable('sessions')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('user_id', 'uuid', (col) => col.notNull())
    .addColumn('organization_id', 'uuid', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('last_used_at', 'timestamptz', (col) => col.notNull())
    .addColumn('expires_at', 'timestamptz', (col) => col.notNull()) // absolute limit, from login
    .addColumn('revoked_at', 'timestamptz')
    .addColumn('revoked_reason', 'text')
    .addColumn('user_agent', 'text')
    .addColumn('ip_address', 'text')
    .execute()
  await sql`create index sessions_user_active_idx on sessions (user_id, created_at desc) where revoked_at is null`.execute(
    db,
  )

  await db.schema
    .createTable('refresh_tokens')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('session_id', 'uuid', (col) => col.notNull().references('sessions.id').onDelete('cascade'))
    .addColumn('token_hash', 'text', (col) => col.notNull().unique()) // SHA-256 hex; the raw token is never stored
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('expires_at', 'timestamptz', (col) => col.notNull())
    .addColumn('rotated_at', 'timestamptz')
    .addColumn('revoked_at', 'timestamptz')
    .execute()
  await db.schema
    .createIndex('refresh_tokens_session_idx')
    .on('refresh_tokens')
    .column('session_id')
    .execute()

  await db.schema
    .createTable('rate_limits')
    .addColumn('key', 'text', (col) => col.primaryKey())
    .addColumn('window_start', 'timestamptz', (col) => col.notNull())
    .addColumn('count', 'integer', (col) => col.notNull())
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('rate_limits').execute()
  await db.schema.dropTable('refresh_tokens').execute()
  await db.schema.dropTable('sessions').execute()
  await db.schema.dropTable('accounts').execute()
}
