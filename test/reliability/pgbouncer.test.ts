import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { FAST_LOGIN_CONFIG, newOrganization, newUser, PASSWORD, type TestUser } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import { type PgBouncer, pgbouncerInstalled, startPgBouncer } from '../helpers/pgbouncer.ts'
import { pollUntil } from '../helpers/poll.ts'
import { envOf, type ServiceProcess, startService } from '../helpers/service-process.ts'

// The service behind a real PgBouncer (Debian's pgbouncer 1.18) in transaction pooling mode, as
// managed PostgreSQL offerings run it: two service processes (src/server.ts, as `npm start` runs
// it) with platform.datasource.url on the pooler and prepared statements off, and their LISTEN
// connection (platform.datasource.listen-url) straight to PostgreSQL. Both trust what they cached
// for an hour, so a revocation made on A reaches B only through NOTIFY. Pointed at the pooler, the
// LISTEN connection stops the start-up with an error naming the property.

const TIMEOUT_MS = 120_000

type Headers = Record<string, string>

interface Reply {
  status: number
  // biome-ignore lint/suspicious/noExplicitAny: answers of several shapes, read field by field
  body: any
  cookies: string[]
}

async function call(
  base: string,
  headers: Headers,
  method: string,
  url: string,
  body?: unknown,
): Promise<Reply> {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(15_000),
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : null, cookies: res.headers.getSetCookie() }
}

async function signIn(base: string, user: TestUser): Promise<{ sessionId: string; headers: Headers }> {
  const res = await call(base, {}, 'POST', '/api/auth/login', { username: user.email, password: PASSWORD })
  expect(res.status).toBe(200)
  const access = res.cookies
    .map((line) => line.split(';')[0] as string)
    .find((p) => p.startsWith('access_token='))
  return { sessionId: res.body.sessionId, headers: { cookie: access as string } }
}

describe.skipIf(!usingPostgres() || !pgbouncerInstalled())(
  'the service through PgBouncer in transaction pooling mode',
  { timeout: TIMEOUT_MS },
  () => {
    let database: TestDatabase
    let bouncer: PgBouncer
    let env: Record<string, string>
    let dataDir: string
    let a: ServiceProcess
    let b: ServiceProcess
    let databaseName: string
    let member: TestUser

    beforeAll(async () => {
      database = await createTestDatabase({ poolSize: 1 })
      const direct = database.url as string
      databaseName = new URL(direct).pathname.slice(1)
      bouncer = await startPgBouncer({ serverUrl: direct, poolMode: 'transaction', poolSize: 4 })
      const config: ConfigSource = {
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.datasource.url': bouncer.urlOf(databaseName),
        'platform.datasource.prepared-statements': 'false',
        'platform.datasource.listen-url': direct,
        'platform.datasource.pool-size': '5',
        'platform.auth.revocation.fallback-ttl': '1h',
        // Access tokens are checked against their session's state (cached, dropped on revocation).
        'platform.auth.session-version.enabled': 'true',
      }
      const seeding = await createTestApp({
        config: { ...config, 'platform.datasource.url': direct },
        database,
      })
      try {
        const organizationId = await newOrganization(seeding.app)
        member = await newUser(seeding.app, { organizationId })
      } finally {
        await seeding.close()
      }
      env = { ...envOf(config), LOG_LEVEL: 'warn' }
      // Each its own data directory: two launchers starting at once on one race for its S3 port.
      dataDir = await mkdtemp(path.join(tmpdir(), 'platform-pgbouncer-test-'))
      const start = (name: string) =>
        startService({ env: { ...env, PLATFORM_DATA_DIR: path.join(dataDir, name) }, readyWithinMs: 60_000 })
      ;[a, b] = await Promise.all([start('a'), start('b')])
    }, TIMEOUT_MS)

    afterAll(async () => {
      await Promise.all([a?.stop(), b?.stop()])
      await bouncer?.stop()
      await database?.dispose()
      if (dataDir) await rm(dataDir, { recursive: true, force: true })
    })

    it('serves logins, purchase requests and reads with every pool connection through the pooler', async () => {
      const sessions = await Promise.all([a, b, a, b].map((service) => signIn(service.base, member)))
      const created = await Promise.all(
        sessions.map((session, i) =>
          call(i % 2 ? b.base : a.base, session.headers, 'POST', '/api/purchase-requests', {
            title: `Through the pooler ${i}`,
          }),
        ),
      )
      expect(created.map((res) => res.status)).toEqual([201, 201, 201, 201])
      const listed = await call(b.base, sessions[0]?.headers ?? {}, 'GET', '/api/purchase-requests?limit=10')
      expect(listed.status).toBe(200)
      expect(listed.body.items.map((item: { title: string }) => item.title).sort()).toEqual(
        [0, 1, 2, 3].map((i) => `Through the pooler ${i}`),
      )
      const clients = await bouncer.admin('SHOW CLIENTS')
      expect(clients.filter((client) => client.database === databaseName).length).toBeGreaterThan(0)
      expect(await call(a.base, {}, 'GET', '/health/ready').then((res) => res.status)).toBe(200)
    })

    it('refuses on B a session revoked on A: the revocation reaches B over its direct LISTEN connection', async () => {
      const [revoked, kept] = await Promise.all([signIn(a.base, member), signIn(a.base, member)])
      const onB = (headers: Headers) =>
        call(b.base, headers, 'GET', '/api/auth/sessions').then((res) => res.status)
      expect(await onB(revoked.headers)).toBe(200)
      expect(await onB(kept.headers)).toBe(200)
      const deleted = await call(a.base, kept.headers, 'DELETE', `/api/auth/sessions/${revoked.sessionId}`)
      expect(deleted.status).toBe(204)
      // Cached for an hour on B: only the NOTIFY sent through the pooler and heard directly explains a 401.
      await pollUntil(
        'B refusing the revoked session',
        async () => (await onB(revoked.headers)) === 401,
        20_000,
      )
      expect(await onB(kept.headers)).toBe(200)
    })

    it('stops the start-up, naming platform.datasource.listen-url, when LISTEN would go through the pooler', async () => {
      const { PLATFORM_DATASOURCE_LISTEN_URL: _direct, ...throughPooler } = env
      const failure = await startService({
        env: { ...throughPooler, PLATFORM_DATA_DIR: path.join(dataDir, 'c') },
        readyWithinMs: 60_000,
      }).then(
        async (service) => {
          await service.stop()
          return 'started'
        },
        (error: Error) => error.message,
      )
      expect(failure).toMatch(
        /Invalid configuration: platform\.datasource\.listen-url \(PLATFORM_DATASOURCE_LISTEN_URL\).*transaction pooler/,
      )
      expect(failure).not.toMatch(/\n\s+at /)
    })
  },
)
