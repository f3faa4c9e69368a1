import { type Kysely, sql } from 'kysely'

// Audit events are chained off the request path: the causing transaction inserts the event without
// its place in the chain (sequence, key_id, previous_hash and hash null), and a chainer links and
// hashes committed events of a chain moments later under the chain head's lock
// (src/audit/chainer.ts). `position` is the order events were written in, from a sequence of its
// own: the chainer takes a chain's unchained events in that order, found through a partial index
// that holds only them.
//
// A webhook endpoint gets the events written after it was created: `audit_position` is the last
// position given out when it was inserted (null on endpoints of the previous release, which are
// matched by their creation time instead; src/features/webhooks/fan-out.ts).
//
// Expand only: the previous release still appends chained events itself under the same head lock,
// and reads only what it wrote before. The column gets its default after it is added, so existing
// rows keep a null position (they are chained) and the table is not rewritten.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create sequence audit_events_position_seq`.execute(db)
  await sql`alter table audit_events add column position bigint`.execute(db)
  await sql`alter table audit_events alter column position set default nextval('audit_events_position_seq')`.execute(
    db,
  )
  await sql`alter sequence audit_events_position_seq owned by audit_events.position`.execute(db)
  for (const column of ['sequence', 'key_id', 'previous_hash', 'hash'])
    await sql`alter table audit_events alter column ${sql.ref(column)} drop not null`.execute(db)
  await sql`alter table webhook_endpoints add column audit_position bigint`.execute(db)
  await sql`create index audit_events_unchained_idx on audit_events (chain, position) where sequence is null`.execute(
    db,
  )
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index audit_events_unchained_idx`.execute(db)
  await sql`alter table webhook_endpoints drop column audit_position`.execute(db)
  for (const column of ['sequence', 'key_id', 'previous_hash', 'hash'])
    await sql`alter table audit_events alter column ${sql.ref(column)} set not null`.execute(db)
  await sql`alter table audit_events drop column position`.execute(db)
}
