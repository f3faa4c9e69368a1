import { type Kysely, sql } from 'kysely'

// One outbox engine for mail and authorization changes (issue 14):
// - a row queued in either outbox wakes the workers of every instance at once: an insert trigger
//   sends NOTIFY on the `outbox` channel with the table's name, delivered when the inserting
//   transaction commits (one per transaction: PostgreSQL folds identical notifications), at no
//   extra round trip for the writer. Authorization changes the embedded evaluator already applied
//   are logged with processed_at set and wake nobody;
// - the authorization outbox gets the dead-letter state the mail outbox has (`failed_at`): a change
//   the model rejects is set aside there, visible to metrics and the CLI, and can be queued again.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function outbox_notify() returns trigger language plpgsql as $$
    begin
      perform pg_notify('outbox', tg_table_name);
      return null;
    end
    $$`.execute(db)
  await sql`
    create trigger mail_outbox_notify after insert on mail_outbox
    for each row execute function outbox_notify()`.execute(db)
  await sql`
    create trigger authz_outbox_notify after insert on authz_outbox
    for each row when (new.processed_at is null) execute function outbox_notify()`.execute(db)
  await db.schema.alterTable('authz_outbox').addColumn('failed_at', 'timestamptz').execute()
  await sql`update authz_outbox set failed_at = processed_at where last_error like 'rejected:%'`.execute(db)
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('authz_outbox').dropColumn('failed_at').execute()
  for (const table of ['mail_outbox', 'authz_outbox']) {
    await sql`drop trigger ${sql.id(`${table}_notify`)} on ${sql.table(table)}`.execute(db)
  }
  await sql`drop function outbox_notify()`.execute(db)
}
