import { type Kysely, sql } from 'kysely'

// Passkeys (WebAuthn credentials) of accounts, the challenges of their ceremonies, and how each
// session was signed in to. A challenge is used once (deleted when used) and belongs to its
// ceremony: a registration to the session that asked for it, an authentication to the account
// named by its username (null: any). Expired ones are removed by housekeeping.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('passkeys')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (col) => col.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('organization_id', 'uuid', (col) => col.notNull().references('organizations.id'))
    // base64url, as the browser reports it
    .addColumn('credential_id', 'text', (col) => col.notNull().unique())
    .addColumn('public_key', 'bytea', (col) => col.notNull())
    .addColumn('counter', 'bigint', (col) => col.notNull().defaultTo(0))
    .addColumn('transports', sql`text[]`, (col) => col.notNull().defaultTo(sql`'{}'`))
    .addColumn('device_type', 'text', (col) =>
      col.notNull().check(sql`device_type in ('singleDevice', 'multiDevice')`),
    )
    .addColumn('backed_up', 'boolean', (col) => col.notNull())
    .addColumn('aaguid', 'text', (col) => col.notNull())
    .addColumn('name', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('last_used_at', 'timestamptz')
    .execute()
  await db.schema.createIndex('passkeys_account_idx').on('passkeys').column('account_id').execute()

  await db.schema
    .createTable('passkey_challenges')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('ceremony', 'text', (col) =>
      col.notNull().check(sql`ceremony in ('registration', 'authentication')`),
    )
    .addColumn('challenge', 'text', (col) => col.notNull())
    .addColumn('session_id', 'uuid')
    .addColumn('account_id', 'uuid')
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('expires_at', 'timestamptz', (col) => col.notNull())
    .execute()
  await db.schema
    .createIndex('passkey_challenges_expires_idx')
    .on('passkey_challenges')
    .column('expires_at')
    .execute()

  // 'password', 'password+otp', 'password+passkey', 'passkey'; null for sessions from before.
  await sql`alter table sessions add column sign_in_method text`.execute(db)
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table sessions drop column sign_in_method`.execute(db)
  await db.schema.dropTable('passkey_challenges').execute()
  await db.schema.dropTable('passkeys').execute()
}
