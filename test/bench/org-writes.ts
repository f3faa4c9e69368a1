// `npm run bench:org-writes`: POST /api/purchase-requests against one `npm start` process on
// PostgreSQL, every connection writing in one organization, then each connection in its own of 16
// organizations, at 1, 4, 16 and 64 connections: req/s, p50 and p99. Every create appends an
// audit event to its organization's hash chain under that chain's row lock, so one
// organization's creates are serialized on it; 16 organizations are not. BENCH_DATABASE_URL (or
// TEST_DATABASE_URL) names the server (a database of its own is created and dropped);
// BENCH_DURATION (seconds, default 3) the length of each run.
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import autocannon from 'autocannon'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { createOrganization } from '../../src/features/organizations/index.ts'
import { freePort } from '../../src/lifecycle.ts'
import { startEmbeddedStorage } from '../../src/storage/embedded-s3.ts'
import { adminQuery, databaseUrl } from '../helpers/postgres-admin.ts'
import { runNode, START_NODE_FLAGS } from '../helpers/process.ts'
import { envOf } from '../helpers/service-process.ts'

const server = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL
if (!server) throw new Error('BENCH_DATABASE_URL (or TEST_DATABASE_URL) must name a PostgreSQL server')
const duration = Number(process.env.BENCH_DURATION ?? 3)
const ORGANIZATIONS = 16
const CONNECTIONS = [1, 4, 16, 64]
const PASSWORD = 'organization-writes-password'

const name = `platform_bench_writes_${randomBytes(4).toString('hex')}`
await adminQuery(server, `create database ${name}`)
const url = databaseUrl(server, name)
const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-bench-writes-'))
const source = {
  'platform.profile': 'test',
  'platform.auth.jwt.secret': randomBytes(32).toString('base64'),
  'platform.datasource.url': url,
  'platform.data-dir': dataDir,
  'platform.auth.password.hash-memory-kib': '1024',
  'platform.auth.password.hash-iterations': '1',
  'platform.auth.rate-limit.login-per-minute': '100000',
}
let service: ReturnType<typeof runNode> | undefined
try {
  // Seeded in this process (it migrates), served by another.
  const seedSource = { ...source, 'platform.data-dir': path.join(dataDir, 'seed') }
  const embeddedS3 = await startEmbeddedStorage(loadConfig(seedSource))
  const seeding = await buildApp(loadConfig({ ...seedSource, ...embeddedS3?.configSource() }), {
    startMailWorker: false,
    startAuthzWorker: false,
    startHousekeeping: false,
    startWebhookWorker: false,
    logLevel: 'warn',
  })
  const emails: string[] = []
  for (let i = 0; i < ORGANIZATIONS; i++) {
    const organization = await createOrganization(seeding.db, { name: `Writers ${i}` })
    const email = `writer-${i}@example.com`
    await seeding.services.users.create({
      organizationId: organization.id,
      email,
      role: 'member',
      password: PASSWORD,
    })
    emails.push(email)
  }
  await seeding.close()
  await embeddedS3?.close()

  const port = await freePort()
  service = runNode(
    'src/server.ts',
    [],
    { ...envOf(source), PLATFORM_SERVER_PORT: String(port), LOG_LEVEL: 'warn' },
    undefined,
    START_NODE_FLAGS,
  )
  const base = `http://127.0.0.1:${port}`
  for (
    let i = 0;
    !(await fetch(`${base}/health/ready`).then(
      (r) => r.ok,
      () => false,
    ));
    i++
  ) {
    if (i > 600) throw new Error(`the service did not start: ${service.child.exitCode}`)
    await delay(100)
  }
  const cookies: string[] = []
  for (const email of emails) {
    const res = await fetch(`${base}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: email, password: PASSWORD }),
    })
    if (res.status !== 200) throw new Error(`login answered ${res.status}`)
    cookies.push(
      res.headers
        .getSetCookie()
        .map((line) => line.split(';')[0])
        .join('; '),
    )
  }

  const run = async (connections: number, organizations: number, seconds: number) => {
    let next = 0
    const result = await autocannon({
      url: `${base}/api/purchase-requests`,
      method: 'POST',
      connections,
      duration: seconds,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'Chairs for everyone' }),
      // Each connection signs in as the writer of one organization, round robin over `organizations`.
      setupClient: (client) => {
        client.setHeaders({
          'content-type': 'application/json',
          cookie: cookies[next++ % organizations] as string,
        })
      },
    })
    return result
  }
  await run(4, ORGANIZATIONS, 1) // warm-up
  console.log('| organizations | connections | req/s | p50 ms | p99 ms | non-2xx |')
  console.log('|---:|---:|---:|---:|---:|---:|')
  for (const organizations of [1, ORGANIZATIONS]) {
    for (const connections of CONNECTIONS) {
      const result = await run(connections, organizations, duration)
      console.log(
        `| ${organizations} | ${connections} | ${Math.round(result.requests.average)} | ${result.latency.p50} | ${result.latency.p99} | ${result.non2xx + result.errors} |`,
      )
    }
  }
} finally {
  service?.child.kill('SIGTERM')
  await service?.done
  await adminQuery(server, `drop database if exists ${name} with (force)`)
  await rm(dataDir, { recursive: true, force: true })
}
