import type { Kysely } from 'kysely'

// Login attempts and deactivation (issue 11):
// - `refused_attempts` counts the login attempts refused while the account was locked. A right
//   password clears a lock only while it is zero, so a burst cannot log in once it is past the
//   limit, though a burst of exactly the allowed attempts behaves as those attempts one by one.
// - `deactivated_at` tells a deactivated account from an invited one (both are inactive): an
//   invitation of a deactivated account cannot be accepted.
// - rate_limits rows of past windows are pruned by housekeeping, which finds them by window_start.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('accounts')
    .addColumn('refused_attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('deactivated_at', 'timestamptz')
    .execute()
  await db.schema.createIndex('rate_limits_window_start').on('rate_limits').column('window_start').execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('rate_limits_window_start').execute()
  await db.schema.alterTable('accounts').dropColumn('refused_attempts').dropColumn('deactivated_at').execute()
}
