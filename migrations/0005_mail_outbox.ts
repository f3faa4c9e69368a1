import { type Kysely, sql } from 'kysely'

// The transactional outbox of email: a row is written in the same transaction as the change that
// causes the message and delivered afterwards, with retries, by the mail worker. Rows are claimed
// with a lease (lease_until), so several instances on one database deliver each message once.
// message_id is the stable Message-ID of the row across retries.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('mail_outbox')
    .addColumn('id', 'bigserial', (col) => col.primaryKey())
    .addColumn('template', 'text', (col) => col.notNull())
    .addColumn('recipient', 'text', (col) => col.notNull())
    .addColumn('data', 'jsonb', (col) => col.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('organization_id', 'uuid', (col) => col.references('organizations.id').onDelete('set null'))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('lease_until', 'timestamptz')
    .addColumn('sent_at', 'timestamptz')
    .addColumn('failed_at', 'timestamptz')
    .addColumn('last_error', 'text')
    .addColumn('message_id', 'text', (col) => col.notNull().unique().defaultTo(sql`gen_random_uuid()::text`))
    .execute()
  await sql`create index mail_outbox_pending_idx on mail_outbox (next_attempt_at, id) where sent_at is null and failed_at is null`.execute(
    db,
  )
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('mail_outbox').execute()
}
