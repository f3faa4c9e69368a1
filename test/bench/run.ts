// `npm run bench`: autocannon against a started instance of the service and a bare Fastify route,
// printing req/s, latency p50/p99 and peak RSS per scenario, and each scenario's throughput as a
// ratio to the bare route; then the revocation reach (test/bench/revocation-reach.ts): p50, p99
// and max of the time from a revocation's return to another instance's first 401, for API keys and
// sessions. BENCH_DURATION (seconds, default 5) and BENCH_CONNECTIONS (default 10) tune the run,
// BENCH_REVOCATION_TRIALS (default 100) the reach; BENCH_DATABASE_URL (or TEST_DATABASE_URL)
// benchmarks on real PostgreSQL, in a fresh database of its own, otherwise on the embedded one
// (where the reach, which needs two processes on one database, is skipped); then the audit export
// (test/bench/audit-export.ts): the service's memory while it streams 100,000 events
// (BENCH_AUDIT_EVENTS), PostgreSQL only. BENCH_ONLY, a regular expression, picks scenarios by name:
// `BENCH_ONLY=revocation` runs the reach alone, `BENCH_ONLY='audit export'` the export, `BENCH_ONLY='machine tokens'`
// the OAuth 2.0 section (test/bench/oauth2.ts).
import { randomBytes } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import autocannon from 'autocannon'
import { sql } from 'kysely'
import { openPGlite, openPostgres } from '../../src/db/database.ts'
import { PurchaseRequestCursor } from '../../src/features/purchase-requests/repository.ts'
import { freePort } from '../../src/lifecycle.ts'
import { adminQuery, databaseUrl } from '../helpers/postgres-admin.ts'
import { runNode, START_NODE_FLAGS } from '../helpers/process.ts'
import { AUDIT_EXPORT, exportLine, GROWTH_GOAL_MB, measureAuditExport } from './audit-export.ts'
import { measureTokenEndpoints, measureVerification, OAUTH2 } from './oauth2.ts'
import { measureRevocationReach, REVOCATION_REACH, reachLine } from './revocation-reach.ts'
import {
  BENCH_ALLOWLIST_ADMIN,
  BENCH_MEMBER,
  BENCH_USER,
  type Scenario,
  type Seed,
  scenarios,
} from './scenarios.ts'

const duration = Number(process.env.BENCH_DURATION ?? 5)
const connections = Number(process.env.BENCH_CONNECTIONS ?? 10)
/** The node flags `npm start` gives the service; BENCH_NODE_OPTIONS (space-separated) replaces them. */
const SERVICE_NODE_FLAGS = process.env.BENCH_NODE_OPTIONS
  ? process.env.BENCH_NODE_OPTIONS.split(/\s+/).filter(Boolean)
  : START_NODE_FLAGS
/**
 * With BENCH_PROFILE=<dir>, a V8 CPU profile of every process of the service and of the floors'
 * server (for a side-by-side look at a row and its floor), written there on exit.
 */
const PROFILED: Record<string, string> = process.env.BENCH_PROFILE
  ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${process.env.BENCH_PROFILE}` }
  : {}

async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
}

/** Starts a server on a free port and waits (bounded) until it answers, whatever its log level. */
async function start(script: string, env: Record<string, string>, nodeFlags: string[] = []) {
  const port = await freePort()
  const server = runNode(script, [], { ...env, PLATFORM_SERVER_PORT: String(port) }, undefined, nodeFlags)
  // The servers' logs are drained and dropped, not collected, so the runner stays light.
  server.child.stdout?.removeAllListeners('data').resume()
  const url = `http://127.0.0.1:${port}`
  const exited = server.done.then((result) => {
    throw new Error(`${script} exited (${result.code}): ${result.stderr}`)
  })
  for (let attempt = 0; attempt < 600; attempt++) {
    const up = await Promise.race([
      fetch(`${url}/health/live`).then(
        (r) => r.ok,
        () => false,
      ),
      exited,
    ])
    if (up) return { ...server, url }
    await delay(100)
  }
  throw new Error(`${script} did not answer on ${url} within 60 s`)
}

/** CPU time (user + system, microseconds) a process has used so far. */
async function cpuMicros(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return ((Number(fields[11] ?? 0) + Number(fields[12] ?? 0)) * 1_000_000) / TICKS_PER_SECOND
}
const TICKS_PER_SECOND = 100

/** CPU time of every PostgreSQL process on this machine (the server is local to the bench). */
async function postgresCpuMicros(): Promise<number> {
  let total = 0
  for (const entry of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue
    const comm = await readFile(`/proc/${entry}/comm`, 'utf8').catch(() => '')
    if (comm.trim() === 'postgres') total += await cpuMicros(Number(entry))
  }
  return total
}

interface Row {
  name: string
  floor: Scenario['floor']
  goal: number | undefined
  /** SQL statements per request (PostgreSQL only; from the bench server's counter). */
  statements: number | undefined
  rps: number
  p50: number
  p99: number
  peakRssMb: number
  /** CPU microseconds per request of the answering server process, and of PostgreSQL. */
  cpuPerRequest: number
  pgCpuPerRequest: number
  unexpected: number
  statuses: string
}

async function statementCount(appUrl: string): Promise<number> {
  const res = await fetch(`${appUrl}/__bench/statements`)
  return ((await res.json()) as { statements: number }).statements
}

async function measure(
  scenario: Scenario,
  baseUrl: string,
  pid: number,
  seed: Seed,
  countStatements: boolean,
): Promise<Row> {
  const options = async () => {
    const { path: preparedPath, ...prepared } = (await scenario.prepare?.(baseUrl, seed)) ?? {}
    return {
      url: `${baseUrl}${preparedPath ?? scenario.path}`,
      method: scenario.method ?? 'GET',
      connections,
      ...prepared,
    }
  }
  await autocannon({ ...(await options()), duration: 1 }) // warm-up
  const measured = await options()
  let peak = await rssKb(pid)
  const sampler = setInterval(async () => {
    peak = Math.max(peak, await rssKb(pid))
  }, 100)
  const before = countStatements ? await statementCount(seed.appUrl) : 0
  const [cpuBefore, pgCpuBefore] = [await cpuMicros(pid), await postgresCpuMicros()]
  const result = await autocannon({ ...measured, duration })
  const [cpuAfter, pgCpuAfter] = [await cpuMicros(pid), await postgresCpuMicros()]
  const after = countStatements ? await statementCount(seed.appUrl) : 0
  clearInterval(sampler)
  const statusCounts = (result as unknown as { statusCodeStats: Record<string, { count: number }> })
    .statusCodeStats
  const expected = statusCounts[String(scenario.expectStatus)]?.count ?? 0
  const total = Object.values(statusCounts).reduce((sum, s) => sum + s.count, 0)
  return {
    name: scenario.name,
    floor: scenario.floor,
    goal: scenario.goal,
    // The counter's own request is not a statement; background workers add a few a second.
    statements: countStatements ? (after - before) / Math.max(1, total) : undefined,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    peakRssMb: peak / 1024,
    cpuPerRequest: (cpuAfter - cpuBefore) / Math.max(1, total),
    pgCpuPerRequest: (pgCpuAfter - pgCpuBefore) / Math.max(1, total),
    unexpected: total - expected + result.errors + result.timeouts,
    statuses: Object.entries(statusCounts)
      .map(([status, { count }]) => `${status}×${count}`)
      .join(' '),
  }
}

const TUPLES = Number(process.env.BENCH_TUPLES ?? 100_000)
const PURCHASE_REQUESTS = Number(process.env.BENCH_PURCHASE_REQUESTS ?? 1_000_000)
const TRANSITION_POOL = 40_000
const OWNED_OBJECT = 'bench-owned'
const DEEP_OFFSET = Math.floor(PURCHASE_REQUESTS * 0.9)

/**
 * Fills the tables before the service starts (it holds PGlite afterwards): TUPLES ownership tuples
 * over 1,000 other organizations and one object owned by the bench organization; PURCHASE_REQUESTS
 * purchase requests in the bench organization (one minute apart), of which TRANSITION_POOL are
 * DRAFTs created by the bench user with their ownership tuples (each submitted once by the
 * transition scenario); a confirmed file on one request. Returns what the scenarios address.
 */
async function seedData(url: string | undefined, dataDir: string, organizationId: string, userId: string) {
  const handle = url ? openPostgres(url, { poolSize: 1 }) : await openPGlite(path.join(dataDir, 'pglite'))
  try {
    const db = handle.db
    await sql`
      insert into authz_tuples (object_type, object_id, relation, subject_type, subject_id, subject_relation)
      select 'purchase_request', 'pr-' || g, 'owner_organization', 'organization', 'org-' || (g % 1000), ''
      from generate_series(1, ${TUPLES}::int) g
      union all
      select 'purchase_request', ${OWNED_OBJECT}, 'owner_organization', 'organization', ${organizationId}, ''
    `.execute(db)
    await sql`
      insert into purchase_requests (id, organization_id, created_by, title, status, created_at, updated_at)
      select md5('pr' || g)::uuid::text, ${organizationId}::uuid, ${userId},
             'Seeded purchase request ' || g,
             case when g <= ${TRANSITION_POOL}::int then 'DRAFT' else 'SUBMITTED' end,
             timestamptz '2026-01-01' - make_interval(mins => g), timestamptz '2026-01-01'
      from generate_series(1, ${PURCHASE_REQUESTS}::int) g
    `.execute(db)
    await sql`
      insert into authz_tuples (object_type, object_id, relation, subject_type, subject_id, subject_relation)
      select 'purchase_request', md5('pr' || g)::uuid::text, 'owner_organization', 'organization', ${organizationId}, ''
      from generate_series(1, ${TRANSITION_POOL}::int) g
    `.execute(db)
    const deep = await sql<{ created_at: Date; id: string }>`
      select created_at, id from purchase_requests where organization_id = ${organizationId}::uuid
      order by created_at desc, id desc offset ${DEEP_OFFSET}::int limit 1
    `.execute(db)
    const fileId = (await sql<{ id: string }>`select gen_random_uuid() as id`.execute(db)).rows[0]
      ?.id as string
    const readable = (await sql<{ id: string }>`select md5('pr1')::uuid::text as id`.execute(db)).rows[0]
      ?.id as string
    await sql`
      insert into files (id, organization_id, resource_type, resource_id, object_key, original_file_name, content_type, status, size_bytes, created_by, created_at, confirmed_at)
      values (${fileId}::uuid, ${organizationId}::uuid, 'purchase_request', ${readable},
              ${`org/${organizationId}/purchase_request/${readable}/${fileId}`}, 'quote.pdf', 'application/pdf', 'CONFIRMED', 1024, ${userId}, now(), now())
    `.execute(db)
    const row = deep.rows[0]
    const deepCursor = row
      ? PurchaseRequestCursor.encode({ createdAt: new Date(row.created_at), id: row.id })
      : ''
    const pool = (
      await sql<{
        id: string
      }>`select md5('pr' || g)::uuid::text as id from generate_series(1, ${TRANSITION_POOL}::int) g`.execute(
        db,
      )
    ).rows.map((r) => r.id)
    return { deepCursor, readablePurchaseRequest: readable, confirmedFileId: fileId, draftPool: pool }
  } finally {
    await handle.close()
  }
}

async function main() {
  // BENCH_ONLY (a regular expression) picks the scenarios of the table whose name matches (the
  // baseline and the floors always run with them) and the revocation reach when it matches
  // REVOCATION_REACH, the audit export when it matches AUDIT_EXPORT; the table is left out when it
  // matches none of its scenarios.
  const only = process.env.BENCH_ONLY ? new RegExp(process.env.BENCH_ONLY) : null
  const table = !only || scenarios.some((s) => only.test(s.name))
  const reach = !only || only.test(REVOCATION_REACH)
  const exporting = !only || only.test(AUDIT_EXPORT)
  const oauth2 = !only || only.test(OAUTH2)
  const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-bench-'))
  const serverUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL
  const benchDb = `platform_bench_${randomBytes(4).toString('hex')}`
  if (serverUrl) await adminQuery(serverUrl, `create database ${benchDb}`)
  const appEnv: Record<string, string> = {
    PLATFORM_AUTH_JWT_SECRET: randomBytes(32).toString('base64'),
    PLATFORM_SERVER_HOST: '127.0.0.1',
    PLATFORM_DATA_DIR: dataDir,
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'info',
    ...PROFILED,
    // The limits would otherwise stop the login and refresh scenarios after a few requests.
    PLATFORM_AUTH_RATE_LIMIT_LOGIN_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_SERVICE_TOKEN_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_REFRESH_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_RESET_PER_HOUR: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_RESET_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_EMAIL_PROOF_PER_MINUTE: '1000000000',
    PLATFORM_AUTH_RATE_LIMIT_EMAIL_PROOF_PER_HOUR: '1000000000',
    PLATFORM_AUTH_SIGN_UP_ENABLED: 'true',
    PLATFORM_AUTH_EMAIL_SIGN_IN_ENABLED: 'true',
    // Concurrent logins of one account claim attempt slots before hashing (the lockout's guard).
    PLATFORM_AUTH_LOCKOUT_MAX_ATTEMPTS: '1000000',
    ...(serverUrl ? { PLATFORM_DATASOURCE_URL: databaseUrl(serverUrl, benchDb) } : {}),
    ...(process.env.BENCH_PREPARED
      ? { PLATFORM_DATASOURCE_PREPARED_STATEMENTS: process.env.BENCH_PREPARED }
      : {}),
  }
  try {
    if (table) await runTable(appEnv, serverUrl, benchDb, dataDir, only)
    if (reach) await runReach(appEnv, serverUrl, dataDir)
    if (exporting) await runExport(appEnv, serverUrl, dataDir)
    if (oauth2) await runOAuth2(appEnv)
  } finally {
    if (serverUrl) await adminQuery(serverUrl, `drop database if exists ${benchDb} with (force)`)
    await rm(dataDir, { recursive: true, force: true })
  }
}

/** The table: every selected scenario under autocannon, with the baseline and the floors. */
async function runTable(
  appEnv: Record<string, string>,
  serverUrl: string | undefined,
  benchDb: string,
  dataDir: string,
  only: RegExp | null,
) {
  // Seed the bench user through the operations CLI, before the service holds the database.
  const org = await runNode('src/cli.ts', ['org', 'create', '--name', 'Bench'], appEnv).done
  const { organizationId } = JSON.parse(org.stdout) as { organizationId: string }
  const user = await runNode(
    'src/cli.ts',
    [
      'user',
      'create',
      '--org',
      organizationId,
      '--email',
      BENCH_USER.email,
      '--role',
      'admin', // can_edit for the file scenarios
      '--password',
      BENCH_USER.password,
    ],
    appEnv,
  ).done
  if (user.code !== 0) throw new Error(`seeding the bench user failed: ${user.stderr}`)
  // A member of the bench organization to impersonate, and an organization with an IP allowlist.
  for (const [org, email, role] of [
    [organizationId, BENCH_MEMBER.email, 'member'],
    [
      JSON.parse(
        (await runNode('src/cli.ts', ['org', 'create', '--name', 'Bench allowlist'], appEnv).done).stdout,
      ).organizationId,
      BENCH_ALLOWLIST_ADMIN.email,
      'admin',
    ],
  ] as const) {
    const made = await runNode(
      'src/cli.ts',
      ['user', 'create', '--org', org, '--email', email, '--role', role, '--password', BENCH_USER.password],
      appEnv,
    ).done
    if (made.code !== 0) throw new Error(`seeding ${email} failed: ${made.stderr}`)
  }
  const key = await runNode(
    'src/cli.ts',
    [
      'api-key',
      'create',
      '--org',
      organizationId,
      '--scopes',
      'files:read,purchase_requests:read',
      '--description',
      'bench',
    ],
    appEnv,
  ).done
  const client = await runNode(
    'src/cli.ts',
    ['service-account', 'create', '--client-id', 'bench', '--scopes', 'files:read', '--description', 'bench'],
    appEnv,
  ).done
  const { rawKey } = JSON.parse(key.stdout) as { rawKey: string }
  const { clientId, clientSecret } = JSON.parse(client.stdout) as { clientId: string; clientSecret: string }
  const { userId } = JSON.parse(user.stdout) as { userId: string }
  const data = await seedData(
    serverUrl ? databaseUrl(serverUrl, benchDb) : undefined,
    dataDir,
    organizationId,
    userId,
  )
  const bare = await start('test/bench/bare-server.ts', {
    ...PROFILED,
    FLOOR_JWT_SECRET: appEnv.PLATFORM_AUTH_JWT_SECRET as string,
    ...(serverUrl ? { FLOOR_DATABASE_URL: databaseUrl(serverUrl, benchDb) } : {}),
  })
  const app = await start('test/bench/bench-server.ts', appEnv, SERVICE_NODE_FLAGS)
  const seed: Seed = {
    appUrl: app.url,
    apiKey: rawKey,
    clientId,
    clientSecret,
    ownedObjectId: OWNED_OBJECT,
    ...data,
  }
  const rows: Row[] = []
  // Idle RSS: started, migrated, nothing served yet but the readiness probe.
  const idleRssMb = (await rssKb(app.child.pid as number)) / 1024
  try {
    for (const scenario of scenarios.filter(
      (s, i) => i === 0 || s.name.startsWith('floor') || !only || only.test(s.name),
    )) {
      const server = scenario.target === 'bare' ? bare : app
      rows.push(
        await measure(
          scenario,
          server.url,
          server.child.pid as number,
          seed,
          Boolean(serverUrl) && server === app,
        ),
      )
    }
  } finally {
    bare.child.kill('SIGTERM')
    app.child.kill('SIGTERM')
    await Promise.all([bare.done, app.done])
  }
  const baseline = rows[0]?.rps ?? 1
  const database = serverUrl ? 'PostgreSQL' : 'embedded PGlite'
  process.stdout.write(
    `\nnpm run bench: ${duration}s per scenario, ${connections} connections, ${database}, ${TUPLES} authorization tuples, ${PURCHASE_REQUESTS} purchase requests in the organization, Node ${process.version}\n\n`,
  )
  const floors = {
    A: rows.find((r) => r.name.startsWith('floor A'))?.rps ?? 0,
    B: rows.find((r) => r.name.startsWith('floor B'))?.rps ?? 0,
    C: rows.find((r) => r.name.startsWith('floor C'))?.rps ?? 0,
  }
  process.stdout.write(
    '| scenario | req/s | p50 ms | p99 ms | statements/req | server CPU µs/req | PostgreSQL CPU µs/req | peak RSS MB | ratio to bare | ratio to floor | goal |\n',
  )
  process.stdout.write('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n')
  for (const row of rows) {
    const floor = row.floor ? floors[row.floor] : 0
    const ratio = row.floor && floor > 0 ? `${(row.rps / floor).toFixed(2)} of ${row.floor}` : ''
    const goal =
      row.goal === undefined || !row.floor
        ? ''
        : `>= ${row.goal} ${floor > 0 && row.rps / floor >= row.goal ? 'met' : 'MISSED'}`
    process.stdout.write(
      `| ${row.name} | ${row.rps.toFixed(0)} | ${row.p50.toFixed(1)} | ${row.p99.toFixed(1)} | ${row.statements === undefined ? '' : row.statements.toFixed(1)} | ${row.cpuPerRequest.toFixed(0)} | ${row.pgCpuPerRequest.toFixed(0)} | ${row.peakRssMb.toFixed(0)} | ${(row.rps / baseline).toFixed(2)} | ${ratio} | ${goal} |\n`,
    )
  }
  const peakRssMb = Math.max(
    ...rows.filter((r) => !r.name.startsWith('floor') && r !== rows[0]).map((r) => r.peakRssMb),
  )
  process.stdout.write(
    `\nservice RSS: ${idleRssMb.toFixed(0)} MB idle, ${peakRssMb.toFixed(0)} MB peak (goals: <= 120 idle, <= 220 peak)\n`,
  )
  // The same argon2 work either way: an unknown account's login should take as long as a known one's.
  const known = rows.find((r) => r.name.startsWith('POST /api/auth/login ('))
  const unknown = rows.find((r) => r.name.startsWith('POST /api/auth/login, unknown account'))
  if (known && unknown) {
    const apart = Math.abs(unknown.rps / known.rps - 1)
    process.stdout.write(
      `login, unknown account against a known one: ${(unknown.rps / known.rps).toFixed(2)} of its req/s, p50 ${unknown.p50.toFixed(0)} against ${known.p50.toFixed(0)} ms (goal: within 5 %: ${apart <= 0.05 ? 'met' : 'MISSED'})\n`,
    )
  }
  // Sign-up and email sign-in answer before they look the address up: known and unknown alike.
  for (const [what, knownName, unknownName] of [
    ['sign-up', 'POST /api/auth/sign-up, existing account', 'POST /api/auth/sign-up, new address'],
    [
      'email sign-in',
      'POST /api/auth/email-sign-in, existing account',
      'POST /api/auth/email-sign-in, unknown address',
    ],
  ] as const) {
    const knownRow = rows.find((r) => r.name.startsWith(knownName))
    const unknownRow = rows.find((r) => r.name.startsWith(unknownName))
    if (!knownRow || !unknownRow) continue
    const apart = Math.abs(unknownRow.rps / knownRow.rps - 1)
    process.stdout.write(
      `${what}, unknown address against a known one: ${(unknownRow.rps / knownRow.rps).toFixed(2)} of its req/s, p50 ${unknownRow.p50.toFixed(1)} against ${knownRow.p50.toFixed(1)} ms (goal: within 5 %: ${apart <= 0.05 ? 'met' : 'MISSED'})\n`,
    )
  }
  if (rows.some((row) => row.unexpected > 0)) {
    process.stderr.write('\nSome responses had an unexpected status: the figures above are not valid.\n')
    for (const row of rows.filter((r) => r.unexpected > 0))
      process.stderr.write(`  ${row.name}: ${row.statuses}\n`)
    process.exitCode = 1
  }
}

/** The revocation reach (test/bench/revocation-reach.ts): two more service processes, PostgreSQL only. */
async function runReach(appEnv: Record<string, string>, serverUrl: string | undefined, dataDir: string) {
  process.stdout.write(`\nnpm run bench: ${REVOCATION_REACH}, Node ${process.version}\n\n`)
  if (!serverUrl) {
    process.stdout.write(
      `${REVOCATION_REACH}: skipped, two service processes on one database need PostgreSQL (BENCH_DATABASE_URL)\n`,
    )
    return
  }
  const figures = await measureRevocationReach(appEnv, dataDir, (env) =>
    start('test/bench/bench-server.ts', env, SERVICE_NODE_FLAGS),
  )
  for (const figure of figures) process.stdout.write(`${reachLine(figure)}\n`)
  const refusedOtherwise = figures.filter((figure) => figure.unexpected.size > 0)
  if (refusedOtherwise.length > 0) {
    process.stderr.write(
      '\nB answered a revoked credential with another status than 401 before refusing it:\n',
    )
    for (const figure of refusedOtherwise) {
      const statuses = [...figure.unexpected].map(([status, count]) => `${status}×${count}`).join(' ')
      process.stderr.write(
        `  ${figure.name}: ${statuses}, in ${figure.trialsWithUnexpected} of ${figure.trials} trials\n`,
      )
    }
    process.exitCode = 1
  }
}

/** The audit export's memory (test/bench/audit-export.ts): one more service process, PostgreSQL only. */
async function runExport(appEnv: Record<string, string>, serverUrl: string | undefined, dataDir: string) {
  process.stdout.write(`\nnpm run bench: ${AUDIT_EXPORT}, Node ${process.version}\n\n`)
  if (!serverUrl) {
    process.stdout.write(`${AUDIT_EXPORT}: skipped, the seeding needs PostgreSQL (BENCH_DATABASE_URL)\n`)
    return
  }
  const figure = await measureAuditExport(appEnv, dataDir, (env) =>
    start('test/bench/bench-server.ts', env, SERVICE_NODE_FLAGS),
  )
  process.stdout.write(`${exportLine(figure)}\n`)
  if (figure.rssPeakMb - figure.rssBeforeMb >= GROWTH_GOAL_MB) process.exitCode = 1
}

/** OAuth 2.0 for machines (test/bench/oauth2.ts): the token endpoints, Ory Hydra's, and signature verification. */
async function runOAuth2(appEnv: Record<string, string>) {
  process.stdout.write(
    `\nnpm run bench: ${OAUTH2}, ${duration}s each, ${connections} connections, Node ${process.version}\n\n`,
  )
  const lines = await measureTokenEndpoints(
    appEnv,
    (env) => start('test/bench/bench-server.ts', env, SERVICE_NODE_FLAGS),
    connections,
    duration,
  )
  for (const line of [...lines, ...(await measureVerification())]) process.stdout.write(`${line}\n`)
}

await main()
