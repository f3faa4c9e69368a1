import { readdir } from 'node:fs/promises'
import type { FastifyInstance } from 'fastify'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { type DatabaseHandle, openPostgres } from '../../src/db/database.ts'
import { MIGRATIONS_FOLDER } from '../../src/db/migrator.ts'
import {
  expectProblem,
  FAST_LOGIN_CONFIG,
  login,
  newUser,
  refresh,
  type Session,
  sessionOf,
  signIn,
  type TestUser,
} from '../helpers/accounts.ts'
import { createTestApp, type TestApp, testConfig } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import { startTestS3, type TestS3 } from '../helpers/s3.ts'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts'

/** The service's pool through the cutting proxy. */
const POOL_SIZE = 5

// The database going away under the service (logins in flight when it goes, logins while it is
// down, a refresh whose rotation fails on it), against real PostgreSQL: the service reaches it
// through a TCP proxy that the test cuts (every connection reset, new ones refused, as when the
// server stops) while requests are in flight, then restores on the same port. The service is never
// restarted.

/** The database reached through a TCP proxy the test can cut, and a pool on the proxy's side. */
async function behindProxy(
  direct: TestDatabase,
): Promise<{ proxy: TcpProxy; handle: DatabaseHandle; url: string }> {
  const url = new URL(direct.url as string)
  const proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port || 5432) })
  url.port = String(proxy.port)
  const handle = openPostgres(url.toString(), { poolSize: POOL_SIZE, onIdleError: () => {} })
  return { proxy, handle, url: url.toString() }
}

describe.skipIf(!usingPostgres())('PostgreSQL going away under the service', () => {
  let direct: TestDatabase
  let proxy: TcpProxy
  let t: TestApp
  let user: TestUser

  beforeAll(async () => {
    direct = await createTestDatabase()
    const proxied = await behindProxy(direct)
    proxy = proxied.proxy
    const { handle, url } = proxied
    t = await createTestApp({
      config: FAST_LOGIN_CONFIG,
      database: { handle, url, dispose: () => handle.close() },
    })
    user = await newUser(t.app)
  }, 60_000)

  afterAll(async () => {
    await t?.close()
    await proxy?.close()
    await direct?.dispose()
  })

  const failedAttempts = async () =>
    (
      await direct.handle.db
        .selectFrom('accounts')
        .select(['failed_attempts', 'locked_until'])
        .where('id', '=', user.id)
        .executeTakeFirstOrThrow()
    ).failed_attempts

  it('logins answer 503 with no cookie and no lockout change while it is down, and work again once it is back', async () => {
    const before = await failedAttempts()
    await proxy.cut()
    try {
      const answers = await Promise.all([
        login(t.app, user.email, user.password),
        login(t.app, user.email, 'wrong password'),
        login(t.app, 'nobody@example.com', 'whatever'),
      ])
      for (const res of answers) {
        expect(res.statusCode, res.body).toBe(503)
        expect(res.json().code).toBe('SERVICE_UNAVAILABLE')
        expect(res.headers['set-cookie']).toBeUndefined()
      }
    } finally {
      await proxy.restore()
    }
    expect(await failedAttempts()).toBe(before)
    // The pool reconnects by itself: no restart.
    const again = await login(t.app, user.email, user.password)
    expect(again.statusCode, again.body).toBe(200)
  }, 30_000)

  it('logins in flight when it goes away end as 200 or 503, never 500, and never a cookie with a 503', async () => {
    const inFlight = Array.from({ length: 10 }, () => login(t.app, user.email, user.password))
    await proxy.cut()
    const answers = await Promise.all(inFlight)
    await proxy.restore()
    for (const res of answers) {
      expect([200, 503], res.body).toContain(res.statusCode)
      if (res.statusCode === 503) expect(res.headers['set-cookie']).toBeUndefined()
    }
    expect((await login(t.app, user.email, user.password)).statusCode).toBe(200)
  }, 30_000)

  it('a refresh that fails on the database answers 503 and leaves the session and its token intact', async () => {
    const session: Session = sessionOf(await login(t.app, user.email, user.password))
    await proxy.cut()
    const failed = await refresh(t.app, session)
    await proxy.restore()
    expect(failed.statusCode, failed.body).toBe(503)
    expect(failed.headers['set-cookie']).toBeUndefined()
    // The same cookie works afterwards: nothing was rotated, nothing counts as reuse. A pooled
    // connection the cut left dead fails its next statement, once: each such try is another 503
    // with no cookie, and the pool replaces the connection.
    let retried = await refresh(t.app, session)
    for (let tries = 1; retried.statusCode === 503 && tries < POOL_SIZE; tries++) {
      expect(retried.headers['set-cookie']).toBeUndefined()
      retried = await refresh(t.app, session)
    }
    expect(retried.statusCode, retried.body).toBe(200)
    const next = sessionOf(retried)
    expect((await refresh(t.app, next)).statusCode).toBe(200)
  }, 30_000)

  it('reports the database in /health/ready while it is down, and UP again after', async () => {
    await proxy.cut()
    const down = await t.app.inject({ method: 'GET', url: '/health/ready' })
    await proxy.restore()
    expect(down.statusCode).toBe(503)
    const up = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expect(up.statusCode, up.body).toBe(200)
  }, 30_000)
})

// Also: the service starts while PostgreSQL is down, reports it in /health/ready and
// answers /api with 503 until it is back, then migrates the (empty) database and serves, without a
// restart.
describe.skipIf(!usingPostgres())('PostgreSQL down when the service starts', () => {
  let direct: TestDatabase
  let proxy: TcpProxy
  let s3: TestS3
  let app: FastifyInstance

  beforeAll(async () => {
    direct = await createTestDatabase({ migrated: false })
    const proxied = await behindProxy(direct)
    proxy = proxied.proxy
    const { handle } = proxied
    await proxy.cut()
    s3 = await startTestS3()
    app = await buildApp(
      testConfig({ ...FAST_LOGIN_CONFIG, ...s3.config, 'platform.datasource.migrate-on-start': 'true' }),
      {
        database: handle,
        startMailWorker: false,
        startAuthzWorker: false,
        startHousekeeping: false,
        logLevel: 'silent',
      },
    )
    app.addHook('onClose', () => handle.close())
    await app.ready()
  }, 60_000)

  afterAll(async () => {
    await app?.close()
    await s3?.close()
    await proxy?.close()
    await direct?.dispose()
  })

  it('is live and not ready, answers /api with 503, then migrates and serves once the database is back', async () => {
    expect(app.migrations.pending).toBe(true)
    expect((await app.inject({ method: 'GET', url: '/health/live' })).statusCode).toBe(200)
    const ready = await app.inject({ method: 'GET', url: '/health/ready' })
    expectProblem(ready, 503, 'SERVICE_UNAVAILABLE')
    expect(ready.json().checks).toMatchObject({ database: 'DOWN' })
    const refused = await login(app, 'someone@example.com', 'whatever password')
    expectProblem(refused, 503, 'SERVICE_UNAVAILABLE')
    expect(refused.headers['retry-after']).toBe('1')
    expect(refused.headers['set-cookie']).toBeUndefined()

    await proxy.restore()
    await app.migrations.migrated
    expect(app.migrations.pending).toBe(false)
    const applied = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(
      direct.handle.db,
    )
    const files = (await readdir(MIGRATIONS_FOLDER)).filter((file) => file.endsWith('.ts'))
    expect(applied.rows.map((row) => row.name)).toEqual(files.map((file) => file.replace(/\.ts$/, '')).sort())
    expect((await app.inject({ method: 'GET', url: '/health/ready' })).statusCode).toBe(200)
    const user = await newUser(app)
    expect((await signIn(app, user)).access).not.toBe('')
  }, 60_000)
})
