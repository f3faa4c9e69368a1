import { type Kysely, sql } from 'kysely'

// Mailed proofs of an address: a sign-up waiting for its address to be proved (the pending
// password hash and organization name in `data`, no account yet), an email sign-in, an email
// change (to the address in `email`). Each is a link token and a six-digit code, both stored
// hashed, used once, valid until `expires_at`, and ended by too many wrong codes (`attempts`).
// The live one of a purpose and address is found by the partial index; a newer one retires it.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('email_proofs')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('purpose', 'text', (col) =>
      col.notNull().check(sql`purpose in ('SIGN_UP', 'EMAIL_SIGN_IN', 'EMAIL_CHANGE')`),
    )
    .addColumn('email', 'text', (col) => col.notNull())
    .addColumn('account_id', 'uuid', (col) => col.references('accounts.id').onDelete('cascade'))
    .addColumn('token_hash', 'text', (col) => col.notNull().unique())
    .addColumn('code_hash', 'text', (col) => col.notNull())
    .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('data', 'jsonb', (col) => col.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('expires_at', 'timestamptz', (col) => col.notNull())
    .addColumn('used_at', 'timestamptz')
    .execute()
  await sql`create index email_proofs_live_idx on email_proofs (purpose, lower(email), created_at) where used_at is null`.execute(
    db,
  )
  await db.schema.createIndex('email_proofs_account_idx').on('email_proofs').column('account_id').execute()
  await db.schema.createIndex('email_proofs_expires_idx').on('email_proofs').column('expires_at').execute()
}

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('email_proofs').execute()
}
