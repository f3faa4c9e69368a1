import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { FAST_LOGIN_CONFIG, newOrganization, newUser, PASSWORD, type TestUser } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import { type Haproxy, haproxyInstalled, startHaproxy } from '../helpers/haproxy.ts'
import { type PgBouncer, pgbouncerInstalled, startPgBouncer } from '../helpers/pgbouncer.ts'
import { pollUntil } from '../helpers/poll.ts'
import { envOf, type ServiceProcess, startService } from '../helpers/service-process.ts'

// Deployed as in production: three `npm start` processes (src/server.ts) behind a real HAProxy
// that health-checks GET /health/ready, on one PostgreSQL database through a real PgBouncer in
// transaction mode (LISTEN straight to PostgreSQL). A steady load from autocannon runs through the
// balancer with one signed-in user's access cookie (reads and purchase-request creations), while
// each instance in turn gets SIGTERM and is started again on its port. Each drains first
// (platform.server.drain-delay: not ready while still serving, until the balancer has taken it
// out), then finishes what is in flight, closes its keep-alive connections and exits 0: the load
// sees only 200 and 201, no connection error and no timeout, and the session still refreshes. A
// session ended afterwards is refused at once by every restarted instance (their LISTEN connections
// came back with them).

const TIMEOUT_MS = 240_000
const NAMES = ['a', 'b', 'c'] as const

interface Load {
  statuses: Map<number, number>
  errors: string[]
  stop(): Promise<autocannon.Result>
}

/** autocannon at a steady `rate` until stopped, every answer counted by status, every error kept. */
function steadyLoad(base: string, cookie: string, rate: number): Load {
  const statuses = new Map<number, number>()
  const errors: string[] = []
  const headers = { cookie }
  let finished: (result: autocannon.Result) => void = () => {}
  const result = new Promise<autocannon.Result>((resolve) => {
    finished = resolve
  })
  const tracker = autocannon(
    {
      url: base,
      connections: 4,
      overallRate: rate,
      duration: 3_600,
      timeout: 20,
      requests: [
        { method: 'GET', path: '/api/purchase-requests?limit=5', headers },
        {
          method: 'POST',
          path: '/api/purchase-requests',
          headers: { ...headers, 'content-type': 'application/json' },
          body: JSON.stringify({ title: 'Under a rolling restart' }),
        },
      ],
    },
    (error, done) => {
      if (error) errors.push(String(error))
      finished(done)
    },
  )
  tracker.on('response', (_client, status) => statuses.set(status, (statuses.get(status) ?? 0) + 1))
  tracker.on('reqError', (error) => errors.push(error.message))
  return {
    statuses,
    errors,
    stop: () => {
      tracker.stop()
      return result
    },
  }
}

describe.skipIf(!usingPostgres() || !haproxyInstalled() || !pgbouncerInstalled())(
  'three instances behind HAProxy and PgBouncer, each restarted under load',
  { timeout: TIMEOUT_MS },
  () => {
    let database: TestDatabase
    let bouncer: PgBouncer
    let haproxy: Haproxy
    let dataDir: string
    let env: Record<string, string>
    let member: TestUser
    const instances = new Map<string, ServiceProcess>()

    const start = (name: string, port?: number) =>
      startService({
        env: { ...env, PLATFORM_DATA_DIR: path.join(dataDir, name) },
        ...(port === undefined ? {} : { port }),
        readyWithinMs: 90_000,
      })

    beforeAll(async () => {
      database = await createTestDatabase({ poolSize: 1 })
      const direct = database.url as string
      bouncer = await startPgBouncer({ serverUrl: direct, poolMode: 'transaction', poolSize: 8 })
      const config: ConfigSource = {
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.datasource.url': bouncer.urlOf(new URL(direct).pathname.slice(1)),
        'platform.datasource.prepared-statements': 'false',
        'platform.datasource.listen-url': direct,
        'platform.datasource.pool-size': '4',
        'platform.server.drain-delay': '2s',
        'platform.auth.cookie.secure': 'false',
        // Access cookies are checked against their session's state, which each instance caches for
        // an hour: only the NOTIFY of a revocation can end one sooner.
        'platform.auth.session-version.enabled': 'true',
        'platform.auth.revocation.fallback-ttl': '1h',
      }
      const seeding = await createTestApp({
        config: { ...config, 'platform.datasource.url': direct },
        database,
      })
      try {
        member = await newUser(seeding.app, { organizationId: await newOrganization(seeding.app) })
      } finally {
        await seeding.close()
      }
      env = { ...envOf(config), LOG_LEVEL: process.env.DEPLOY_LOG_LEVEL ?? 'warn' }
      dataDir = await mkdtemp(path.join(tmpdir(), 'platform-deploy-'))
      // One at a time: three cold starts at once on two cores only take longer.
      for (const name of NAMES) instances.set(name, await start(name))
      haproxy = await startHaproxy({
        servers: NAMES.map((name) => ({ name, port: (instances.get(name) as ServiceProcess).port })),
        interMs: 250,
        fall: 2,
        rise: 2,
      })
      for (const name of NAMES) await haproxy.sees(name, 'UP')
    }, TIMEOUT_MS)

    afterAll(async () => {
      await Promise.all([...instances.values()].map((instance) => instance.stop()))
      await haproxy?.stop()
      await bouncer?.stop()
      await database?.dispose()
      if (dataDir) await rm(dataDir, { recursive: true, force: true })
    })

    it('answers every request of a steady load while each instance in turn drains, exits 0 and comes back', async () => {
      const login = await fetch(`${haproxy.base}/api/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ username: member.email, password: PASSWORD }),
      })
      expect(login.status).toBe(200)
      const cookies = login.headers.getSetCookie().map((line) => line.split(';')[0] as string)
      const cookie = cookies.join('; ')

      const load = steadyLoad(haproxy.base, cookie, 100)
      const order: string[] = []
      for (const name of NAMES) {
        const instance = instances.get(name) as ServiceProcess
        const exited = instance.stop().then((finished) => {
          order.push(`${name} exited`)
          return finished
        })
        await haproxy.sees(name, 'DOWN')
        order.push(`${name} taken out`)
        const finished = await exited
        expect(finished.code, instance.output()).toBe(0)
        instances.set(name, await start(name, instance.port))
        await haproxy.sees(name, 'UP')
      }
      const result = await load.stop()

      const answered = Object.fromEntries(load.statuses)
      console.log(
        `rolling restart under load: ${result.requests.total} requests, ${result.requests.average} req/s, ` +
          `p99 ${result.latency.p99} ms, answers ${JSON.stringify(answered)}; ${order.join(', ')}`,
      )
      expect(load.errors).toEqual([])
      expect(result.timeouts).toBe(0)
      expect(Object.keys(answered).sort()).toEqual(['200', '201'])
      expect(result.non2xx).toBe(0)
      // Each instance was taken out by the balancer before it stopped accepting.
      expect(order).toEqual(NAMES.flatMap((name) => [`${name} taken out`, `${name} exited`]))

      // The session survives: its access cookie reads, and its refresh token rotates, on new instances.
      const sessions = await fetch(`${haproxy.base}/api/auth/sessions`, { headers: { cookie } })
      expect(sessions.status).toBe(200)
      const refreshed = await fetch(`${haproxy.base}/api/auth/refresh`, {
        method: 'POST',
        headers: { cookie },
      })
      expect(refreshed.status).toBe(200)
    })

    it('revokes, on every restarted instance, a session ended through the balancer', async () => {
      const signIn = async () => {
        const res = await fetch(`${haproxy.base}/api/auth/login`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ username: member.email, password: PASSWORD }),
        })
        expect(res.status).toBe(200)
        const { sessionId } = (await res.json()) as { sessionId: string }
        const cookie = res.headers
          .getSetCookie()
          .map((line) => line.split(';')[0] as string)
          .find((pair) => pair.startsWith('access_token=')) as string
        return { sessionId, cookie }
      }
      const [revoked, kept] = [await signIn(), await signIn()]
      const onEach = (cookie: string) =>
        Promise.all(
          NAMES.map(async (name) => {
            const res = await fetch(`${(instances.get(name) as ServiceProcess).base}/api/auth/sessions`, {
              headers: { cookie },
            })
            await res.arrayBuffer()
            return res.status
          }),
        )
      // Each instance now holds the session's state.
      expect(await onEach(revoked.cookie)).toEqual([200, 200, 200])
      const ended = await fetch(`${haproxy.base}/api/auth/sessions/${revoked.sessionId}`, {
        method: 'DELETE',
        headers: { cookie: kept.cookie },
      })
      expect(ended.status).toBe(204)
      await pollUntil(
        'every instance refusing the revoked session',
        async () => (await onEach(revoked.cookie)).every((status) => status === 401),
        20_000,
      )
      expect(await onEach(kept.cookie)).toEqual([200, 200, 200])
    })
  },
)
