import { type Kysely, sql } from 'kysely'

// Rate-limit counters are rewritten by every limited request (login, refresh, password reset), each
// hit in a commit of its own. They are worth nothing after a crash (a window lasts a minute or an
// hour), so the table is unlogged: a commit that only counts a hit writes no WAL and waits for no
// flush. What that gives up: after a crash of the database server (not a clean restart) and on a
// promoted replica the counters start again from zero, as a rate limiter in memory would. The
// account lockout (`accounts.failed_attempts`) is not a counter of this table and stays durable.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table rate_limits set unlogged`.execute(db)
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table rate_limits set logged`.execute(db)
}
