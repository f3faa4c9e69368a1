// `npm run bench:deployed`: one `npm start` instance, then three behind HAProxy, each time through
// PgBouncer in transaction mode (test/helpers/deployment.ts) on a database of its own on the
// PostgreSQL server BENCH_DATABASE_URL (or TEST_DATABASE_URL) names, under the same closed-loop load:
// BENCH_CONNECTIONS (default 24) connections over 3 organizations × 2 signed-in members, each looping
// over two purchase-request lists and one creation, for BENCH_DURATION seconds (default 10) after a
// 3 s warm-up. Prints req/s, p50 and p99 (of every answer), and the PostgreSQL connections of the
// database (pg_stat_activity, sampled every 250 ms: the most at once, and the most running a
// statement) beside PgBouncer's own view (SHOW POOLS, sampled every second: the most client
// connections, server connections, and clients waiting for one).
import pg from 'pg'
import { startDeployment } from '../helpers/deployment.ts'
import {
  benchServer,
  deployedConfig,
  mixedLoad,
  percentile,
  seededDatabase,
  signInAll,
} from './deployed-common.ts'

const server = benchServer('npm run bench:deployed')
const duration = Number(process.env.BENCH_DURATION ?? 10)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 24)
const INSTANCES = [1, 3]
const BOUNCER_POOL = 10

const config = deployedConfig()

const database = await seededDatabase(server, 'platform_bench_deployed', config, 3, 2)
const databaseName = new URL(database.url).pathname.slice(1)
const monitor = new pg.Client({ connectionString: server })
await monitor.connect()
try {
  console.log(
    `bench:deployed: ${connections} connections, ${duration} s per row, PgBouncer default_pool_size ${BOUNCER_POOL}`,
  )
  console.log(
    '| instances | req/s | p50 ms | p99 ms | non-2xx | PG connections, most | of them active, most | PgBouncer clients, most | PgBouncer server connections, most | clients waiting, most |',
  )
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const count of INSTANCES) {
    const names = ['a', 'b', 'c'].slice(0, count)
    const deployment = await startDeployment({
      directUrl: database.url,
      config,
      names,
      poolSize: BOUNCER_POOL,
      logLevel: 'error',
      haproxy: { interMs: 1000, fall: 2, rise: 2 },
    })
    try {
      const cookies = await signInAll(deployment.base, database.emails)
      await mixedLoad(deployment.base, cookies, connections, 3, () => {}).done // warm-up
      const latencies: number[] = []
      let non2xx = 0
      let errors = 0
      const seen = { pg: 0, active: 0, clients: 0, servers: 0, waiting: 0 }
      let sampling = true
      const samplePg = (async () => {
        while (sampling) {
          const { rows } = await monitor.query(
            `select count(*)::int as total, (count(*) filter (where state = 'active'))::int as active
               from pg_stat_activity where datname = $1`,
            [databaseName],
          )
          seen.pg = Math.max(seen.pg, rows[0].total)
          seen.active = Math.max(seen.active, rows[0].active)
          await new Promise((resolve) => setTimeout(resolve, 250))
        }
      })()
      const sampleBouncer = (async () => {
        while (sampling) {
          const pool = (await deployment.bouncer.admin('SHOW POOLS')).find(
            (row) => row.database === databaseName,
          )
          if (pool) {
            const n = (column: string) => Number(pool[column] ?? 0)
            seen.clients = Math.max(seen.clients, n('cl_active') + n('cl_waiting'))
            seen.servers = Math.max(
              seen.servers,
              n('sv_active') + n('sv_idle') + n('sv_used') + n('sv_tested') + n('sv_login'),
            )
            seen.waiting = Math.max(seen.waiting, n('cl_waiting'))
          }
          await new Promise((resolve) => setTimeout(resolve, 1000))
        }
      })()
      const started = performance.now()
      await mixedLoad(
        deployment.base,
        cookies,
        connections,
        duration,
        (status, ms) => {
          latencies.push(ms)
          if (status < 200 || status > 299) non2xx += 1
        },
        () => {
          errors += 1
        },
      ).done
      const seconds = (performance.now() - started) / 1000
      sampling = false
      await Promise.all([samplePg, sampleBouncer])
      latencies.sort((a, b) => a - b)
      console.log(
        `| ${count} | ${Math.round(latencies.length / seconds)} | ${Math.round(percentile(latencies, 0.5))} | ${Math.round(percentile(latencies, 0.99))} | ${non2xx + errors} | ${seen.pg} | ${seen.active} | ${seen.clients} | ${seen.servers} | ${seen.waiting} |`,
      )
    } finally {
      await deployment.stop()
    }
  }
} finally {
  await monitor.end()
  await database.drop()
}
