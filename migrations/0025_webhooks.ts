import { type Kysely, sql } from 'kysely'

// Webhooks: an organization's endpoints, the webhook outbox (one row per message and endpoint,
// delivered by the outbox engine and woken by the `outbox` channel's insert trigger), and every
// attempt made, for the deliveries list. Secrets are stored sealed (the service's secret box),
// never readable at rest; a rotated secret is kept, sealed, until it stops being signed with.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('webhook_endpoints')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('organization_id', 'uuid', (col) =>
      col.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('url', 'text', (col) => col.notNull())
    .addColumn('description', 'text', (col) => col.notNull().defaultTo(''))
    .addColumn('event_types', sql`text[]`, (col) => col.notNull())
    .addColumn('enabled', 'boolean', (col) => col.notNull().defaultTo(true))
    .addColumn('disabled_reason', 'text', (col) => col.check(sql`disabled_reason in ('gone', 'failing')`))
    .addColumn('secret', 'text', (col) => col.notNull())
    .addColumn('previous_secret', 'text')
    .addColumn('previous_secret_expires_at', 'timestamptz')
    .addColumn('consecutive_failures', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('failing_since', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull())
    .execute()
  await db.schema
    .createIndex('webhook_endpoints_organization_idx')
    .on('webhook_endpoints')
    .columns(['organization_id', 'created_at'])
    .execute()
  await db.schema
    .createTable('webhook_outbox')
    .addColumn('id', 'bigserial', (col) => col.primaryKey())
    // The webhook-id header: the same on every attempt, so a receiver can drop duplicates.
    .addColumn('message_id', 'text', (col) =>
      col.notNull().defaultTo(sql`'msg_' || replace(gen_random_uuid()::text, '-', '')`),
    )
    .addColumn('endpoint_id', 'uuid', (col) =>
      col.notNull().references('webhook_endpoints.id').onDelete('cascade'),
    )
    .addColumn('organization_id', 'uuid', (col) => col.notNull())
    .addColumn('event_type', 'text', (col) => col.notNull())
    // The body, fixed when queued: every attempt sends the same bytes.
    .addColumn('payload', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('next_attempt_at', 'timestamptz', (col) => col.notNull())
    .addColumn('lease_until', 'timestamptz')
    .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('delivered_at', 'timestamptz')
    .addColumn('failed_at', 'timestamptz')
    .addColumn('last_error', 'text')
    .execute()
  await sql`
    create index webhook_outbox_due_idx on webhook_outbox (next_attempt_at)
    where delivered_at is null and failed_at is null`.execute(db)
  await db.schema
    .createIndex('webhook_outbox_endpoint_idx')
    .on('webhook_outbox')
    .column('endpoint_id')
    .execute()
  await sql`
    create trigger webhook_outbox_notify after insert on webhook_outbox
    for each row execute function outbox_notify()`.execute(db)
  await db.schema
    .createTable('webhook_attempts')
    .addColumn('id', 'bigserial', (col) => col.primaryKey())
    .addColumn('endpoint_id', 'uuid', (col) =>
      col.notNull().references('webhook_endpoints.id').onDelete('cascade'),
    )
    .addColumn('organization_id', 'uuid', (col) => col.notNull())
    .addColumn('message_id', 'text', (col) => col.notNull())
    .addColumn('event_type', 'text', (col) => col.notNull())
    .addColumn('attempt', 'integer', (col) => col.notNull())
    .addColumn('attempted_at', 'timestamptz', (col) => col.notNull())
    .addColumn('status_code', 'integer')
    .addColumn('duration_ms', 'integer', (col) => col.notNull())
    .addColumn('error', 'text')
    // What the attempt led to: delivered, retrying, dead-lettered or the endpoint disabled.
    .addColumn('outcome', 'text', (col) =>
      col.notNull().check(sql`outcome in ('delivered', 'retrying', 'dead_letter', 'endpoint_disabled')`),
    )
    .execute()
  await db.schema
    .createIndex('webhook_attempts_endpoint_idx')
    .on('webhook_attempts')
    .columns(['endpoint_id', 'id'])
    .execute()
  await db.schema
    .createIndex('webhook_attempts_time_idx')
    .on('webhook_attempts')
    .column('attempted_at')
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('webhook_attempts').execute()
  await db.schema.dropTable('webhook_outbox').execute()
  await db.schema.dropTable('webhook_endpoints').execute()
}
