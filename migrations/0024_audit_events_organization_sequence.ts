import { type Kysely, sql } from 'kysely'

// The audit trail is read by organization in sequence order (pages newest first, exports oldest
// first, a batch at a time after a sequence): an index on (organization_id, sequence) serves both
// in index order. The (organization_id, occurred_at, id) index of 0023 let the planner choose a
// scan of the whole organization and a sort for every batch of an export, once PostgreSQL settled
// on a generic plan: 100,000 events took a minute, 200,000 five.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`drop index if exists audit_events_organization_time_idx`.execute(db)
  await db.schema
    .createIndex('audit_events_organization_sequence_idx')
    .on('audit_events')
    .columns(['organization_id', 'sequence'])
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('audit_events_organization_sequence_idx').execute()
  await db.schema
    .createIndex('audit_events_organization_time_idx')
    .on('audit_events')
    .columns(['organization_id', 'occurred_at', 'id'])
    .execute()
}
