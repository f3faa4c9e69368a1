import { type Kysely, sql } from 'kysely'

// Tables that work as queues or hot counters (issue 19, the decay): every delivery marks a row
// processed, every lease renewal and rate-limit hit rewrites one. Each such update leaves a dead
// entry in the pending-row index that every later "what is due?" scan walks while an older snapshot
// is open (measured: 1,354 buffers and 4.5-6 ms per scan at 66,622 dead entries, 2 buffers and
// 0.02 ms after VACUUM). With PostgreSQL's default, autovacuum waits for 20 % of the table to be
// dead, a threshold that grows with the table, so those scans got slower the longer the service
// ran. Here a vacuum follows every 1,000 dead rows whatever the table's size, which keeps the
// scans' cost constant.

const QUEUE_TABLES = ['authz_outbox', 'mail_outbox', 'worker_leases', 'rate_limits']

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  for (const table of QUEUE_TABLES) {
    await sql`alter table ${sql.table(table)} set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000, autovacuum_analyze_scale_factor = 0.02)`.execute(
      db,
    )
  }
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  for (const table of QUEUE_TABLES) {
    await sql`alter table ${sql.table(table)} reset (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold, autovacuum_analyze_scale_factor)`.execute(
      db,
    )
  }
}
