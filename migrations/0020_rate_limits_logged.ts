import { type Kysely, sql } from 'kysely'

// Undoes 0019: `rate_limits` is a logged table again. With unlogged counters a rate-limited
// request's commit no longer waited for a WAL flush, so under a login flood the 429 answers came
// faster and denser, kept the cores busier, and the liveness probe slowed: /health/live during the
// flood of test/reliability/login-flood.test.ts went from a p99 of 27-31 ms to 33-51 ms. The
// counters are durable again, as before 0019: they survive a crash of the database server and
// carry over to a promoted replica. 0019 stays, because a database that applied it keeps its name
// in the migration table and the migrator refuses to run without that file; on a database that
// never applied it, 0019 then this one leave the table as it was. Setting a table logged rewrites
// it into the WAL under an exclusive lock, which is brief here: housekeeping keeps only the
// counters of current windows.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table rate_limits set logged`.execute(db)
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table rate_limits set unlogged`.execute(db)
}
