// `npm run soak`: SOAK_MINUTES (default 10) of a mixed workload on real PostgreSQL against one
// service process whose clock runs SOAK_CLOCK_RATE (default 60) times faster than real time, so
// tokens expire, sessions end and every retention rule fires during the run. SOAK_CONNECTIONS
// (default 16) closed-loop clients each sign in as their own user and loop over: list, create,
// submit, approve, session listing, refresh, upload initiation (left PENDING), password-reset
// requests, and logout + login. Prints per minute req/s, p50/p99, the server's RSS and the rows
// (live and dead) of every table a retention rule governs; exits 1 when the last three minutes'
// mean throughput is below 90 % of minutes 2-4, when RSS grows after the second minute, when a
// governed table keeps growing, or on any unexpected status.
import { randomBytes } from 'node:crypto'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { sql } from 'kysely'
import { openPostgres } from '../../src/db/database.ts'
import { freePort } from '../../src/lifecycle.ts'
import { adminQuery, databaseUrl } from '../helpers/postgres-admin.ts'
import { runNode } from '../helpers/process.ts'

const MINUTES = Number(process.env.SOAK_MINUTES ?? 10)
const CONNECTIONS = Number(process.env.SOAK_CONNECTIONS ?? 16)
const PASSWORD = 'soak-password-0123456789'
/** Tables a retention rule governs, and the traffic tables that only grow by design. */
const GOVERNED = [
  'authz_outbox',
  'mail_outbox',
  'sessions',
  'refresh_tokens',
  'one_time_tokens',
  'rate_limits',
  'files',
]
const GROWING = ['purchase_requests', 'purchase_request_events', 'authz_tuples']

const serverUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL
if (!serverUrl) {
  process.stderr.write('npm run soak needs PostgreSQL: set BENCH_DATABASE_URL or TEST_DATABASE_URL\n')
  process.exit(2)
}

interface Minute {
  requests: number
  latencies: number[]
  statuses: Map<number, number>
  unexpected: string[]
}
const newMinute = (): Minute => ({ requests: 0, latencies: [], statuses: new Map(), unexpected: [] })

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024
}

function cookie(res: Response, name: string): string | undefined {
  for (const line of res.headers.getSetCookie()) {
    const match = new RegExp(`^${name}=([^;]*)`).exec(line)
    if (match?.[1]) return match[1]
  }
  return undefined
}

/** One closed-loop client: its own user, its own session, its own drafts. */
class Client {
  access = ''
  refresh = ''
  drafts: string[] = []
  readonly base: string
  readonly email: string
  readonly record: (started: number, status: number, what: string, expected: number[]) => void
  readonly submitted: string[]
  constructor(
    base: string,
    email: string,
    record: (started: number, status: number, what: string, expected: number[]) => void,
    submitted: string[],
  ) {
    this.base = base
    this.email = email
    this.record = record
    this.submitted = submitted
  }

  async call(method: string, url: string, body: unknown, what: string, expected: number[]) {
    const started = performance.now()
    const res = await fetch(`${this.base}${url}`, {
      method,
      headers: {
        cookie: `access_token=${this.access}; refresh_token=${this.refresh}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await res.text()
    this.record(started, res.status, `${what} ${res.status} ${text.slice(0, 160)}`, expected)
    return { res, text }
  }

  async login() {
    const { res } = await this.call(
      'POST',
      '/api/auth/login',
      { username: this.email, password: PASSWORD },
      'login',
      [200],
    )
    this.access = cookie(res, 'access_token') ?? ''
    this.refresh = cookie(res, 'refresh_token') ?? ''
  }

  async rotate(): Promise<boolean> {
    const { res } = await this.call('POST', '/api/auth/refresh', undefined, 'refresh', [200, 401])
    if (res.status !== 200) return false
    this.access = cookie(res, 'access_token') ?? this.access
    this.refresh = cookie(res, 'refresh_token') ?? this.refresh
    return true
  }

  /** A call as a browser client makes it: on 401, refresh once (sign in again if that fails), retry once. */
  async api(method: string, url: string, body: unknown, what: string, expected: number[]) {
    const first = await this.call(method, url, body, what, [...expected, 401])
    if (first.res.status !== 401) return first
    if (!(await this.rotate())) await this.login()
    return this.call(method, url, body, what, expected)
  }

  async step() {
    const roll = Math.random()
    if (roll < 0.35) {
      await this.api('GET', '/api/purchase-requests?limit=20', undefined, 'list', [200])
    } else if (roll < 0.55) {
      const { res, text } = await this.api(
        'POST',
        '/api/purchase-requests',
        { title: `Soak ${Date.now()}` },
        'create',
        [201],
      )
      if (res.status === 201) this.drafts.push(JSON.parse(text).id)
    } else if (roll < 0.62) {
      const id = this.drafts.shift()
      if (!id) return
      const { res } = await this.api(
        'POST',
        `/api/purchase-requests/${id}/submit`,
        undefined,
        'submit',
        [200],
      )
      if (res.status === 200) this.submitted.push(id)
    } else if (roll < 0.67) {
      const id = this.submitted.shift()
      if (id) await this.api('POST', `/api/purchase-requests/${id}/approve`, undefined, 'approve', [200])
    } else if (roll < 0.85) {
      await this.api('GET', '/api/auth/sessions', undefined, 'sessions', [200])
    } else if (roll < 0.91) {
      if (!(await this.rotate())) await this.login()
    } else if (roll < 0.95) {
      const resourceId = this.drafts[0]
      if (!resourceId) return
      const body = {
        resourceType: 'purchase_request',
        resourceId,
        fileName: 'quote.pdf',
        contentType: 'application/pdf',
      }
      await this.api('POST', '/api/storage/files', body, 'initiate', [201])
    } else if (roll < 0.98) {
      await this.call('POST', '/api/auth/password-reset/request', { email: this.email }, 'reset', [202])
    } else {
      await this.call('POST', '/api/auth/logout', undefined, 'logout', [204])
      await this.login()
    }
  }
}

/** Set when the server runs without autovacuum: the soak then vacuums once a minute. */
let vacuumEachMinute = false

async function main() {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-soak-'))
  const name = `platform_soak_${randomBytes(4).toString('hex')}`
  await adminQuery(serverUrl as string, `create database ${name}`)
  const url = databaseUrl(serverUrl as string, name)
  const env: Record<string, string> = {
    PLATFORM_AUTH_JWT_SECRET: randomBytes(32).toString('base64'),
    PLATFORM_DATASOURCE_URL: url,
    PLATFORM_DATA_DIR: dataDir,
    PLATFORM_SERVER_HOST: '127.0.0.1',
    PLATFORM_DATASOURCE_POOL_SIZE: '16',
    // Virtual time: an hour a real minute at the default rate. Windows short enough to pass in a run.
    PLATFORM_RETENTION_OUTBOX: '30m',
    PLATFORM_RETENTION_SESSIONS: '2h',
    PLATFORM_RETENTION_ONE_TIME_TOKENS: '30m',
    PLATFORM_RETENTION_PENDING_UPLOADS: '30m',
    PLATFORM_RETENTION_IDEMPOTENCY_KEYS: '1h',
    PLATFORM_AUTH_REFRESH_TOKEN_TTL: '2h',
    PLATFORM_AUTH_SESSION_ABSOLUTE_TTL: '3h',
    PLATFORM_AUTH_RATE_LIMIT_LOGIN_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_REFRESH_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_RESET_PER_HOUR: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_RESET_PER_MINUTE: '1000000000',
    LOG_LEVEL: 'error',
  }
  const org = JSON.parse((await runNode('src/cli.ts', ['org', 'create', '--name', 'Soak'], env).done).stdout)
  const emails = Array.from({ length: CONNECTIONS }, (_, i) => `soak${i}@example.test`)
  for (const email of emails) {
    const args = [
      'user',
      'create',
      '--org',
      org.organizationId,
      '--email',
      email,
      '--role',
      'admin',
      '--password',
      PASSWORD,
    ]
    const created = await runNode('src/cli.ts', args, env).done
    if (created.code !== 0) throw new Error(`seeding ${email} failed: ${created.stderr}`)
  }
  const port = await freePort()
  const server = runNode('test/bench/soak-server.ts', [], { ...env, PLATFORM_SERVER_PORT: String(port) })
  server.child.stdout?.removeAllListeners('data').resume()
  const base = `http://127.0.0.1:${port}`
  for (let attempt = 0; ; attempt++) {
    if (
      (await fetch(`${base}/health/live`).then(
        (r) => r.ok,
        () => false,
      )) === true
    )
      break
    if (attempt > 600) throw new Error('the soak server did not start')
    await delay(100)
  }
  const pid = server.child.pid as number
  const db = openPostgres(url, { poolSize: 1 })
  const minutes: Minute[] = []
  const samples: { rss: number; rows: Record<string, { live: number; dead: number }> }[] = []
  let current = newMinute()
  const record = (started: number, status: number, what: string, expected: number[]) => {
    current.requests++
    current.latencies.push(performance.now() - started)
    current.statuses.set(status, (current.statuses.get(status) ?? 0) + 1)
    if (!expected.includes(status) && current.unexpected.length < 5) current.unexpected.push(what)
  }
  // A production PostgreSQL vacuums by itself; a server with autovacuum off (as this project's CI
  // machines are set up) would measure table bloat instead of the service. There, the soak does
  // autovacuum's job once a minute, on its own database, and says so.
  const autovacuum = (await sql<{ autovacuum: string }>`show autovacuum`.execute(db.db)).rows[0]?.autovacuum
  vacuumEachMinute = autovacuum !== 'on'
  if (vacuumEachMinute)
    process.stderr.write('soak: autovacuum is off on this server: vacuuming every minute\n')
  const sample = async () => {
    if (vacuumEachMinute) await sql`vacuum (analyze)`.execute(db.db)
    const rows: Record<string, { live: number; dead: number }> = {}
    for (const table of [...GOVERNED, ...GROWING]) {
      const count = await sql<{ n: string }>`select count(*) as n from ${sql.table(table)}`.execute(db.db)
      const stats = await sql<{ dead: string }>`
        select n_dead_tup as dead from pg_stat_user_tables where relname = ${table}`.execute(db.db)
      rows[table] = { live: Number(count.rows[0]?.n ?? 0), dead: Number(stats.rows[0]?.dead ?? 0) }
    }
    samples.push({ rss: await rssMb(pid), rows })
  }
  const deadline = Date.now() + MINUTES * 60_000
  const submitted: string[] = []
  const clients = emails.map((email) => new Client(base, email, record, submitted))
  try {
    await Promise.all(clients.map((c) => c.login()))
    await sample()
    const ticker = setInterval(() => {
      minutes.push(current)
      current = newMinute()
      void sample()
      process.stderr.write(
        `soak: minute ${minutes.length} of ${MINUTES}: ${(minutes.at(-1)?.requests ?? 0) / 60} req/s\n`,
      )
    }, 60_000)
    await Promise.all(
      clients.map(async (client) => {
        while (Date.now() < deadline) await client.step()
      }),
    )
    clearInterval(ticker)
    if (minutes.length < MINUTES) {
      minutes.push(current)
      await sample()
    }
  } finally {
    server.child.kill('SIGTERM')
    await server.done
    await db.close()
    await adminQuery(serverUrl as string, `drop database if exists ${name} with (force)`)
    await rm(dataDir, { recursive: true, force: true })
  }
  report(minutes, samples)
}

function report(
  minutes: Minute[],
  samples: { rss: number; rows: Record<string, { live: number; dead: number }> }[],
) {
  const out = (line: string) => process.stdout.write(`${line}\n`)
  out(
    `\nnpm run soak: ${MINUTES} min, ${CONNECTIONS} clients, PostgreSQL, clock x${process.env.SOAK_CLOCK_RATE ?? 60}, Node ${process.version}${vacuumEachMinute ? ', autovacuum off on the server: VACUUM (ANALYZE) once a minute' : ''}\n`,
  )
  out(`| minute | req/s | p50 ms | p99 ms | RSS MB | ${GOVERNED.join(' | ')} | ${GROWING.join(' | ')} |`)
  out(`|---:|---:|---:|---:|---:|${[...GOVERNED, ...GROWING].map(() => '---:').join('|')}|`)
  const rates = minutes.map((m) => m.requests / 60)
  minutes.forEach((m, i) => {
    const sorted = [...m.latencies].sort((a, b) => a - b)
    const s = samples[i + 1]
    const cells = [...GOVERNED, ...GROWING].map(
      (t) => `${s?.rows[t]?.live ?? '?'} (${s?.rows[t]?.dead ?? '?'} dead)`,
    )
    out(
      `| ${i + 1} | ${(rates[i] ?? 0).toFixed(0)} | ${percentile(sorted, 0.5).toFixed(1)} | ${percentile(sorted, 0.99).toFixed(1)} | ${(s?.rss ?? 0).toFixed(0)} | ${cells.join(' | ')} |`,
    )
  })
  const statuses = new Map<number, number>()
  for (const m of minutes)
    for (const [status, n] of m.statuses) statuses.set(status, (statuses.get(status) ?? 0) + n)
  out(`\nstatuses: ${[...statuses].map(([s, n]) => `${s}×${n}`).join(' ')}`)
  const failures: string[] = []
  const unexpected = minutes.flatMap((m) => m.unexpected)
  if (unexpected.length > 0) failures.push(`unexpected answers, e.g. ${unexpected.slice(0, 5).join(' / ')}`)
  // Decay: the last three minutes against minutes 2-4 (after warm-up), as means, so that one noisy
  // minute on shared cores neither hides a decay nor fails a flat run.
  const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / Math.max(values.length, 1)
  const early = mean(rates.slice(1, 4))
  const late = mean(rates.slice(-3))
  if (late < 0.9 * early)
    failures.push(
      `the last three minutes averaged ${late.toFixed(0)} req/s < 90 % of minutes 2-4 (${early.toFixed(0)})`,
    )
  const rssAt2 = samples[2]?.rss ?? 0
  const rssEnd = samples.at(-1)?.rss ?? 0
  if (rssAt2 > 0 && rssEnd > rssAt2 * 1.1)
    failures.push(`RSS grew from ${rssAt2.toFixed(0)} MB (minute 2) to ${rssEnd.toFixed(0)} MB`)
  for (const table of GOVERNED) {
    const series = samples.map((s) => s.rows[table]?.live ?? 0)
    const tail = series.slice(-4)
    const rising = tail.length === 4 && tail.every((n, i) => i === 0 || n > (tail[i - 1] ?? 0))
    if (rising && (tail[3] ?? 0) > 1.1 * (tail[0] ?? 0))
      failures.push(`${table} keeps growing: ${tail.join(' → ')}`)
  }
  if (failures.length > 0) {
    out(`\nFAILED:\n${failures.map((f) => `  - ${f}`).join('\n')}`)
    process.exitCode = 1
  } else {
    out('\npassed: throughput, RSS and every governed table stayed flat')
  }
}

await main()
