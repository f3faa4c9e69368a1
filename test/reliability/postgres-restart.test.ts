import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { type DatabaseHandle, openPostgres } from '../../src/db/database.ts'
import { migrateToLatest } from '../../src/db/migrator.ts'
import { FAST_LOGIN_CONFIG, newUser, type TestUser } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { usingPostgres } from '../helpers/database.ts'
import { pollUntil } from '../helpers/poll.ts'
import { type PostgresCluster, startPostgresCluster } from '../helpers/postgres-cluster.ts'
import { startTestS3, type TestS3 } from '../helpers/s3.ts'
import { envOf, type ServiceProcess, startService } from '../helpers/service-process.ts'

// The database going away (logins in flight and logins while it is down; a refresh whose rotation
// fails on it), with a real server going away: the service runs as `npm start` runs it (its own
// process), on a PostgreSQL cluster this test created, and the test stops that server with pg_ctl
// while requests are in flight: a fast shutdown (every session terminated with 57P01, then
// connections refused) and an immediate one (a crash: sessions dropped without a word, WAL recovery
// at the next start). The service is never restarted: its pool must recover by itself. The
// TCP-proxy variant of the same faults is postgres-outage.test.ts. Runs on the PostgreSQL leg of
// CI, which has the server binaries.

interface Reply {
  status: number
  cookies: string[]
  // biome-ignore lint/suspicious/noExplicitAny: answers of several shapes, read field by field
  body: any
  retryAfter: string | null
}

async function call(
  base: string,
  method: string,
  url: string,
  init: { body?: unknown; cookie?: string } = {},
) {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: {
      ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(init.cookie ? { cookie: init.cookie } : {}),
    },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    signal: AbortSignal.timeout(30_000),
  })
  const text = await res.text()
  return {
    status: res.status,
    cookies: res.headers.getSetCookie(),
    body: text ? JSON.parse(text) : null,
    retryAfter: res.headers.get('retry-after'),
  } satisfies Reply
}

const login = (base: string, username: string, password: string) =>
  call(base, 'POST', '/api/auth/login', { body: { username, password } })

function refreshCookie(reply: Reply): string {
  const line = reply.cookies.find((cookie) => cookie.startsWith('refresh_token='))
  if (!line) throw new Error(`no refresh cookie in ${reply.status} ${JSON.stringify(reply.body)}`)
  return line.slice(0, line.indexOf(';'))
}

/** A 503 the service means: the catalogue's code, Retry-After, and no cookie. */
function expectUnavailable(reply: Reply, what: string) {
  expect(reply.status, `${what}: ${JSON.stringify(reply.body)}`).toBe(503)
  expect(reply.body.code).toBe('SERVICE_UNAVAILABLE')
  expect(reply.cookies, what).toEqual([])
}

/**
 * A load a server stop lands in the middle of: each user signs in again and again, one login after
 * another, until `stop()`. Every answer is kept in order; a request that got no answer at all is
 * kept as status 0 (and fails the test's status check).
 */
function loginLoad(base: string, users: readonly TestUser[]) {
  const replies: Reply[] = []
  let running = true
  const loops = users.map(async (user) => {
    while (running) {
      replies.push(
        await login(base, user.email, user.password).catch(
          (error: unknown): Reply => ({ status: 0, cookies: [], body: String(error), retryAfter: null }),
        ),
      )
    }
  })
  return {
    replies,
    async stop() {
      running = false
      await Promise.all(loops)
      return replies
    },
  }
}

/** Polls until `probe` is true: the pool must find the server again by itself. */
const eventually = (probe: () => Promise<boolean>, withinMs: number, what: string) =>
  pollUntil(what, probe, withinMs, 100)

describe.skipIf(!usingPostgres())('a real PostgreSQL server stopped and started under the service', () => {
  let cluster: PostgresCluster
  let direct: DatabaseHandle
  let s3: TestS3
  let env: Record<string, string>
  let service: ServiceProcess
  let user: TestUser
  /** Users of the background load, one login at a time each (as people sign in). */
  const loadUsers: TestUser[] = []

  beforeAll(async () => {
    ;[cluster, s3] = await Promise.all([startPostgresCluster(), startTestS3()])
    direct = openPostgres(cluster.url, { poolSize: 2, onIdleError: () => {} })
    await migrateToLatest(direct.db)
    const config: ConfigSource = {
      ...FAST_LOGIN_CONFIG,
      'platform.profile': 'test',
      'platform.auth.jwt.secret': testSecret(),
      'platform.datasource.url': cluster.url,
      'platform.datasource.pool-size': '5',
      // The load below is thousands of logins from one address.
      'platform.auth.rate-limit.login-per-minute': '100000',
      ...s3.config,
    }
    const seeding = await createTestApp({
      config,
      database: { handle: direct, url: cluster.url, dispose: async () => undefined },
    })
    try {
      user = await newUser(seeding.app)
      for (let i = 0; i < 6; i++) loadUsers.push(await newUser(seeding.app))
    } finally {
      await seeding.close()
    }
    env = { ...envOf(config), LOG_LEVEL: 'warn' }
    service = await startService({ env })
  }, 120_000)

  afterAll(async () => {
    await service?.stop()
    await direct?.close()
    await s3?.close()
    await cluster?.destroy()
  })

  const failedAttempts = async () =>
    (
      await direct.db
        .selectFrom('accounts')
        .select('failed_attempts')
        .where('id', '=', user.id)
        .executeTakeFirstOrThrow()
    ).failed_attempts

  const expectServiceAlive = () => expect(service.child.exitCode, service.output()).toBeNull()

  it('fast shutdown: logins in flight end as 200 or 503, logins while it is stopped are 503 with no lockout change, and the pool recovers after the start', async () => {
    const before = await failedAttempts()
    const load = loginLoad(service.base, loadUsers)
    try {
      await eventually(async () => load.replies.length >= 20, 10_000, 'logins under load')
      await cluster.stop('fast')
      try {
        const whileDown = await Promise.all([
          login(service.base, user.email, user.password),
          login(service.base, user.email, 'a wrong password'),
          login(service.base, 'nobody@example.com', 'whatever'),
        ])
        for (const reply of whileDown) expectUnavailable(reply, 'a login while the server is stopped')
        const ready = await call(service.base, 'GET', '/health/ready')
        expect(ready.status).toBe(503)
        expect(ready.body.checks).toMatchObject({ database: 'DOWN' })
        expect((await call(service.base, 'GET', '/health/live')).status).toBe(200)
        expectServiceAlive()
      } finally {
        await cluster.start()
      }
      const stoppedAt = load.replies.length
      await eventually(
        async () => load.replies.slice(stoppedAt).filter((reply) => reply.status === 200).length >= 20,
        10_000,
        'logins after the server started again',
      )
    } finally {
      await load.stop()
    }
    const statuses = load.replies.map((reply) => reply.status)
    // The load ran through the shutdown: it saw logins succeed, then 503s, then succeed again.
    expect(statuses.filter((status) => status !== 200 && status !== 503)).toEqual([])
    expect(statuses.indexOf(503)).toBeGreaterThan(0)
    expect(statuses.lastIndexOf(200)).toBeGreaterThan(statuses.lastIndexOf(503))
    for (const reply of load.replies) if (reply.status === 503) expectUnavailable(reply, 'a login under load')
    expect((await call(service.base, 'GET', '/health/ready')).status).toBe(200)
    // The wrong password sent while the server was stopped was refused, not counted later.
    expect(await failedAttempts()).toBe(before)
    // Every user of the load signs in after the restart: a login cut off between its attempt
    // claim and its settlement leaves one counted attempt at most, never a lock.
    for (const loadUser of loadUsers) {
      expect((await login(service.base, loadUser.email, loadUser.password)).status).toBe(200)
    }
    expectServiceAlive()
  }, 120_000)

  it('a crash (immediate shutdown) during a refresh: 503, the session and its token intact, the retry with the same cookie succeeds after recovery', async () => {
    const signedIn = await login(service.base, user.email, user.password)
    expect(signedIn.status).toBe(200)
    const cookie = refreshCookie(signedIn)
    const load = loginLoad(service.base, loadUsers.slice(0, 4))
    try {
      await eventually(async () => load.replies.length >= 20, 10_000, 'logins under load')
      await cluster.stop('immediate')
      try {
        expectUnavailable(
          await call(service.base, 'POST', '/api/auth/refresh', { cookie }),
          'a refresh during the crash',
        )
        expectServiceAlive()
      } finally {
        await cluster.start()
      }
      // Nothing was rotated and nothing counts as reuse: the same cookie, then its successor.
      let retried: Reply | undefined
      await eventually(
        async () => {
          retried = await call(service.base, 'POST', '/api/auth/refresh', { cookie })
          expect([200, 503], JSON.stringify(retried.body)).toContain(retried.status)
          return retried.status === 200
        },
        10_000,
        'the refresh after recovery',
      )
      const next = await call(service.base, 'POST', '/api/auth/refresh', {
        cookie: refreshCookie(retried as Reply),
      })
      expect(next.status, JSON.stringify(next.body)).toBe(200)
      await eventually(async () => load.replies.at(-1)?.status === 200, 10_000, 'logins after recovery')
    } finally {
      await load.stop()
    }
    const statuses = load.replies.map((reply) => reply.status)
    expect(statuses.filter((status) => status !== 200 && status !== 503)).toEqual([])
    expect(statuses).toContain(503)
    expect(statuses.at(-1)).toBe(200)
    expectServiceAlive()
  }, 120_000)

  it('starts while the server is stopped: live, not ready, /api 503 with Retry-After; ready and serving once it starts, without a restart', async () => {
    await cluster.stop('fast')
    let second: ServiceProcess | undefined
    try {
      second = await startService({
        env: { ...env, ...envOf({ 'platform.datasource.migrate-on-start': 'true' }) },
      })
      const ready = await call(second.base, 'GET', '/health/ready')
      expect(ready.status).toBe(503)
      expect(ready.body.checks).toMatchObject({ database: 'DOWN' })
      const refused = await login(second.base, user.email, user.password)
      expectUnavailable(refused, 'a login before the server started')
      expect(refused.retryAfter).not.toBeNull()
      await cluster.start()
      const service2 = second
      await eventually(
        async () => (await call(service2.base, 'GET', '/health/ready')).status === 200,
        15_000,
        'readiness after the server started',
      )
      expect((await login(second.base, user.email, user.password)).status).toBe(200)
      expect(second.child.exitCode, second.output()).toBeNull()
    } finally {
      await second?.stop()
    }
  }, 120_000)
})
