// `npm run soak:deployed`: SOAK_MINUTES (default 60) of a steady mixed load against three `npm
// start` instances behind HAProxy, through PgBouncer in transaction mode (test/helpers/deployment.ts),
// on a database of its own on the PostgreSQL server BENCH_DATABASE_URL (or TEST_DATABASE_URL) names.
// SOAK_CONNECTIONS (default 12) closed-loop connections over 3 organizations × 2 members, each
// looping over two purchase-request lists and one creation; the members sign in again at the start
// of every minute (access tokens last 12 minutes). Prints per minute the load's req/s, p99 and
// non-2xx, and per instance its RSS (VmRSS of /proc/<pid>/status), req/s and p99 as the balancer
// logged them (one UDP log line per request: the server that answered and its response time).
// Exits 1 on any answer but 2xx or a connection error, when an instance is not UP at the end of a
// minute, when an instance's RSS at the end grew more than 10 % over its RSS after minute 2, or when
// the mean throughput of the last three minutes (from minute 2 on), of the load or of one instance,
// is below 90 % of minutes 2-4. A production PostgreSQL vacuums by itself; on a server with
// autovacuum off (this project's CI machines) the soak does autovacuum's job between minutes, on its
// own database (`VACUUM (ANALYZE)`), and says so, as `npm run soak` does: without it the dead rows of
// the audit chainer's updates pile up in the unchained events' index and the load slows minute by minute.
import { readFile } from 'node:fs/promises'
import pg from 'pg'
import { startDeployment } from '../helpers/deployment.ts'
import { type LoggedRequest, requestLog } from '../helpers/haproxy.ts'
import {
  benchServer,
  deployedConfig,
  mixedLoad,
  percentile,
  seededDatabase,
  signInAll,
} from './deployed-common.ts'

const MINUTES = Number(process.env.SOAK_MINUTES ?? 60)
const CONNECTIONS = Number(process.env.SOAK_CONNECTIONS ?? 12)
const NAMES = ['a', 'b', 'c'] as const
const server = benchServer('npm run soak:deployed')

async function rssMb(pid: number | undefined): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024
}

interface InstanceMinute {
  requests: number
  latencies: number[]
  rssMb: number
}

interface Minute {
  requests: number
  latencies: number[]
  failures: number
  byInstance: Map<string, InstanceMinute>
}

const config = deployedConfig({ 'platform.server.drain-delay': '3s' })

const database = await seededDatabase(server, 'platform_soak_deployed', config, 3, 2)
let current: Minute | undefined
const log = await requestLog((request: LoggedRequest) => {
  const mine = current?.byInstance.get(request.server)
  if (!mine) return
  mine.requests += 1
  if (request.responseMs >= 0) mine.latencies.push(request.responseMs)
})
const deployment = await startDeployment({
  directUrl: database.url,
  config,
  names: NAMES,
  poolSize: 10,
  logLevel: 'error',
  haproxy: { interMs: 1000, fall: 2, rise: 2, logPort: log.port },
}).catch(async (error) => {
  await log.close()
  await database.drop()
  throw error
})

const problems: string[] = []
const minutes: Minute[] = []
const admin = new pg.Client({ connectionString: database.url })
await admin.connect()
const vacuumEachMinute =
  (await admin.query<{ autovacuum: string }>('show autovacuum')).rows[0]?.autovacuum !== 'on'
try {
  if (vacuumEachMinute)
    console.log('soak:deployed: autovacuum is off on this server: VACUUM (ANALYZE) between minutes')
  console.log(
    `soak:deployed: ${MINUTES} min, ${CONNECTIONS} connections, instances ${NAMES.map((name) => `${name} (pid ${deployment.instance(name).child.pid})`).join(', ')}`,
  )
  console.log(
    `| minute | req/s | p99 ms | non-2xx | ${NAMES.map((name) => `${name} RSS MB | ${name} req/s | ${name} p99 ms`).join(' | ')} |`,
  )
  console.log(`|---:|---:|---:|---:|${NAMES.map(() => '---:|---:|---:|').join('')}`)
  for (let m = 1; m <= MINUTES; m++) {
    const minute: Minute = {
      requests: 0,
      latencies: [],
      failures: 0,
      byInstance: new Map(NAMES.map((name) => [name, { requests: 0, latencies: [], rssMb: 0 }])),
    }
    current = minute
    const started = performance.now()
    const cookies = await signInAll(deployment.base, database.emails)
    const remaining = Math.max(1, Math.round(60 - (performance.now() - started) / 1000))
    await mixedLoad(
      deployment.base,
      cookies,
      CONNECTIONS,
      remaining,
      (status, ms) => {
        minute.requests += 1
        minute.latencies.push(ms)
        if (status < 200 || status > 299) minute.failures += 1
      },
      (error) => {
        minute.failures += 1
        if (problems.length < 20) problems.push(`minute ${m}: ${error.message}`)
      },
    ).done
    const seconds = (performance.now() - started) / 1000
    const statuses = await deployment.haproxy.statuses()
    for (const name of NAMES) {
      const mine = minute.byInstance.get(name) as InstanceMinute
      mine.rssMb = await rssMb(deployment.instance(name).child.pid)
      mine.latencies.sort((a, b) => a - b)
      if (statuses.get(name) !== 'UP')
        problems.push(`minute ${m}: the balancer sees ${name} ${statuses.get(name)}`)
    }
    minute.latencies.sort((a, b) => a - b)
    if (minute.failures > 0) problems.push(`minute ${m}: ${minute.failures} answers other than 2xx or errors`)
    minutes.push(minute)
    const cells = NAMES.map((name) => {
      const mine = minute.byInstance.get(name) as InstanceMinute
      return `${mine.rssMb.toFixed(0)} | ${(mine.requests / seconds).toFixed(0)} | ${percentile(mine.latencies, 0.99)}`
    })
    if (vacuumEachMinute) await admin.query('vacuum (analyze)')
    console.log(
      `| ${m} | ${(minute.requests / seconds).toFixed(0)} | ${Math.round(percentile(minute.latencies, 0.99))} | ${minute.failures} | ${cells.join(' | ')} |`,
    )
  }
  current = undefined

  // Minutes are 1-based in the rules: baseline minutes 2-4, tail the last three from minute 2 on.
  const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / Math.max(1, values.length)
  const span = (from: number, to: number) => minutes.slice(Math.max(1, from) - 1, Math.min(MINUTES, to))
  const baseline = span(2, 4)
  const tail = span(Math.max(2, MINUTES - 2), MINUTES)
  if (MINUTES >= 2) {
    const rate = (list: Minute[], of: (minute: Minute) => number) => mean(list.map(of))
    const checks: [string, (minute: Minute) => number][] = [
      ['the load', (minute) => minute.requests],
      ...NAMES.map(
        (name) =>
          [`instance ${name}`, (minute: Minute) => minute.byInstance.get(name)?.requests ?? 0] as [
            string,
            (minute: Minute) => number,
          ],
      ),
    ]
    for (const [what, of] of checks) {
      const [before, after] = [rate(baseline, of), rate(tail, of)]
      if (after < 0.9 * before)
        problems.push(
          `${what}: the last minutes' throughput ${after.toFixed(0)}/min is below 90 % of minutes 2-4 (${before.toFixed(0)}/min)`,
        )
    }
    for (const name of NAMES) {
      const [after2, last] = [minutes[1], minutes[minutes.length - 1]].map(
        (minute) => minute?.byInstance.get(name)?.rssMb ?? 0,
      ) as [number, number]
      if (last > 1.1 * after2)
        problems.push(
          `instance ${name}: RSS ${last.toFixed(0)} MB at the end, more than 10 % over ${after2.toFixed(0)} MB after minute 2`,
        )
    }
  }
} finally {
  await admin.end()
  await deployment.stop()
  await log.close()
  await database.drop()
}
if (problems.length > 0) {
  console.log(`soak:deployed FAILED:\n${problems.map((problem) => `- ${problem}`).join('\n')}`)
  process.exit(1)
}
console.log('soak:deployed passed: no failed request, every instance UP, RSS and throughput steady')
