import { type Kysely, sql } from 'kysely'

// The audit trail: one hash chain per organization (`chain` is its id, or `system` for events of
// no organization: sign-ins of unknown accounts, service accounts). `audit_chain_heads` holds each
// chain's last sequence and hash; appending locks that row, so a chain's events are numbered
// without gaps in commit order. Each event keeps the hash it was chained to (`previous_hash`), so
// what retention leaves can still be verified from its first row; the key that hashed it is named
// by `key_id` (the key itself is a secret of the deployment, never stored).

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('audit_events')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('chain', 'text', (col) => col.notNull())
    .addColumn('sequence', 'bigint', (col) => col.notNull())
    // No foreign key: a deployment's own authenticator may sign in users of organizations the
    // service has no row for (sessions keep such ids too), and events outlive what they name.
    .addColumn('organization_id', 'uuid')
    .addColumn('occurred_at', 'timestamptz', (col) => col.notNull())
    .addColumn('type', 'text', (col) => col.notNull())
    .addColumn('actor_type', 'text', (col) =>
      col.notNull().check(sql`actor_type in ('user', 'api_key', 'service_account', 'system')`),
    )
    .addColumn('actor_id', 'text')
    .addColumn('subject_type', 'text')
    .addColumn('subject_id', 'text')
    .addColumn('ip_address', 'text')
    .addColumn('user_agent', 'text')
    .addColumn('request_id', 'text')
    .addColumn('data', 'jsonb', (col) => col.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('key_id', 'text', (col) => col.notNull())
    .addColumn('previous_hash', 'text', (col) => col.notNull())
    .addColumn('hash', 'text', (col) => col.notNull())
    .addUniqueConstraint('audit_events_chain_sequence_key', ['chain', 'sequence'])
    .execute()
  await db.schema
    .createIndex('audit_events_organization_time_idx')
    .on('audit_events')
    .columns(['organization_id', 'occurred_at', 'id'])
    .execute()
  await db.schema
    .createTable('audit_chain_heads')
    .addColumn('chain', 'text', (col) => col.primaryKey())
    .addColumn('sequence', 'bigint', (col) => col.notNull())
    .addColumn('hash', 'text', (col) => col.notNull())
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('audit_chain_heads').execute()
  await db.schema.dropTable('audit_events').execute()
}
