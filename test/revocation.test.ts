import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { runWithTenant } from '../src/context.ts'
import { openPostgres } from '../src/db/database.ts'
import { InvalidatedCache } from '../src/db/invalidated-cache.ts'
import type { UserPrincipal } from '../src/principal.ts'
import { parseRevocation } from '../src/security/revocation.ts'
import { FAST_LOGIN_CONFIG, newOrganization, newUser, signIn } from './helpers/accounts.ts'
import { createTestApp, type TestApp, useTestApp } from './helpers/app.ts'
import { usingPostgres } from './helpers/database.ts'
import { newApiKey, protectedTestRoutes, serviceBearer } from './helpers/machines.ts'
import { pollUntil } from './helpers/poll.ts'

// Revocations reach every instance on one database through NOTIFY (src/security/revocation.ts):
// two instances here, A revoking and B having the credential cached. B trusts what it looked up
// for an hour (platform.auth.revocation.fallback-ttl), so only the pushed revocation can explain
// its 401 within the test. test/revocation.processes.test.ts does the same with real processes and
// the CLI; the benchmark suite measures how long the push takes.

const CONFIG = {
  ...FAST_LOGIN_CONFIG,
  'platform.auth.session-version.enabled': 'true',
  'platform.auth.revocation.fallback-ttl': '1h',
}

const a = useTestApp({ config: CONFIG, configure: protectedTestRoutes() })

/**
 * Instance B: on PostgreSQL with a pool and a LISTEN connection of its own, as a second process
 * has them; PGlite is one in-process session, which both instances share.
 */
const withB = async (work: (b: FastifyInstance) => Promise<void>) => {
  const url = a.database.url
  const handle = url ? openPostgres(url, { poolSize: 4 }) : undefined
  let b: TestApp | undefined
  try {
    b = await createTestApp({
      database: handle && url ? { handle, url, dispose: () => handle.close() } : a.database,
      clock: a.clock,
      config: { ...CONFIG, 'platform.auth.jwt.secret': a.config.auth.jwt.secret },
      configure: protectedTestRoutes(),
    })
    await work(b.app)
  } finally {
    await b?.close()
    await handle?.close()
  }
}

const sessions = (app: FastifyInstance, access: string) =>
  app.inject({ method: 'GET', url: '/api/auth/sessions', cookies: { access_token: access } })
const scoped = (app: FastifyInstance, headers: Record<string, string>) =>
  app.inject({ method: 'GET', url: '/api/test/scoped', headers })

/** Asks B until it answers 401; any other answer but the cached 200 fails the test. */
async function refusedOn(b: FastifyInstance, ask: (app: FastifyInstance) => Promise<{ statusCode: number }>) {
  const seen = new Set<number>()
  await pollUntil(
    'B refusing the revoked credential',
    async () => {
      const status = (await ask(b)).statusCode
      seen.add(status)
      return status === 401
    },
    20_000,
    2,
  )
  expect([...seen].filter((status) => status !== 200 && status !== 401)).toEqual([])
}

describe('revocations pushed to another instance', () => {
  it('ends a revoked session on B, and only that session', async () => {
    await withB(async (b) => {
      const user = await newUser(a.app)
      const revoked = await signIn(a.app, user)
      const kept = await signIn(a.app, user)
      expect((await sessions(b, revoked.access)).statusCode).toBe(200)
      expect((await sessions(b, kept.access)).statusCode).toBe(200)

      const res = await a.app.inject({
        method: 'DELETE',
        url: `/api/auth/sessions/${revoked.sessionId}`,
        cookies: { access_token: kept.access },
      })
      expect(res.statusCode).toBe(204)
      await refusedOn(b, (app) => sessions(app, revoked.access))
      expect((await sessions(b, kept.access)).statusCode).toBe(200)
    })
  })

  it('ends every session of a user who logs out everywhere, and no other user’s', async () => {
    await withB(async (b) => {
      const user = await newUser(a.app)
      const other = await signIn(a.app, await newUser(a.app))
      const first = await signIn(a.app, user)
      const second = await signIn(a.app, user)
      for (const access of [first.access, second.access, other.access])
        expect((await sessions(b, access)).statusCode).toBe(200)

      const res = await a.app.inject({
        method: 'POST',
        url: '/api/auth/logout-all',
        cookies: { access_token: first.access },
      })
      expect(res.statusCode).toBe(204)
      await refusedOn(b, (app) => sessions(app, first.access))
      await refusedOn(b, (app) => sessions(app, second.access))
      expect((await sessions(b, other.access)).statusCode).toBe(200)
    })
  })

  it('ends a deactivated user’s access on B', async () => {
    await withB(async (b) => {
      const organizationId = await newOrganization(a.app)
      const admin = await newUser(a.app, { organizationId, role: 'admin' })
      const member = await newUser(a.app, { organizationId })
      const signedIn = await signIn(a.app, member)
      expect((await sessions(b, signedIn.access)).statusCode).toBe(200)

      const caller: UserPrincipal = {
        type: 'USER',
        id: admin.id,
        userId: admin.id,
        organizationId,
        sessionId: randomUUID(),
      }
      await a.app.authz.outbox.runOnce()
      await runWithTenant(organizationId, () => a.app.services.users.deactivate(caller, member.id))
      await refusedOn(b, (app) => sessions(app, signedIn.access))
    })
  })

  it('ends on B the access tokens issued before a role change made on A', async () => {
    await withB(async (b) => {
      const organizationId = await newOrganization(a.app)
      const admin = await newUser(a.app, { organizationId, role: 'admin' })
      const member = await newUser(a.app, { organizationId })
      const signedIn = await signIn(a.app, member)
      const other = await signIn(a.app, await newUser(a.app, { organizationId }))
      expect((await sessions(b, signedIn.access)).statusCode).toBe(200)

      const caller: UserPrincipal = {
        type: 'USER',
        id: admin.id,
        userId: admin.id,
        organizationId,
        sessionId: randomUUID(),
      }
      await a.app.authz.outbox.runOnce()
      await runWithTenant(organizationId, () => a.app.services.users.changeRole(caller, member.id, 'admin'))
      await refusedOn(b, (app) => sessions(app, signedIn.access))
      expect((await sessions(b, other.access)).statusCode).toBe(200)
    })
  })

  it('ends on B the other sessions of a user who changed the password on A, and keeps the one that changed it', async () => {
    await withB(async (b) => {
      const user = await newUser(a.app)
      const changing = await signIn(a.app, user)
      const elsewhere = await signIn(a.app, user)
      expect((await sessions(b, elsewhere.access)).statusCode).toBe(200)
      expect((await sessions(b, changing.access)).statusCode).toBe(200)

      const res = await a.app.inject({
        method: 'POST',
        url: '/api/auth/password/change',
        cookies: { access_token: changing.access },
        payload: { currentPassword: user.password, newPassword: 'another long enough passphrase' },
      })
      expect(res.statusCode).toBe(204)
      await refusedOn(b, (app) => sessions(app, elsewhere.access))
      expect((await sessions(b, changing.access)).statusCode).toBe(200)
    })
  })

  it('ends a revoked API key and a disabled service account on B', async () => {
    await withB(async (b) => {
      const organizationId = await newOrganization(a.app)
      const key = await newApiKey(a.app, organizationId, ['files:read'])
      const control = await newApiKey(a.app, organizationId, ['files:read'])
      const clientId = `backend-${randomUUID()}`
      const bearer = await serviceBearer(a.app, ['files:read'], clientId)
      expect((await scoped(b, key.headers)).statusCode).toBe(200)
      expect((await scoped(b, control.headers)).statusCode).toBe(200)
      expect((await scoped(b, bearer)).statusCode).toBe(200)

      await a.app.services.apiKeys.revoke(key.id)
      await refusedOn(b, (app) => scoped(app, key.headers))
      await a.app.services.serviceAccounts.disable(clientId)
      await refusedOn(b, (app) => scoped(app, bearer))
      expect((await scoped(b, control.headers)).statusCode).toBe(200)
    })
  })
})

describe.runIf(usingPostgres())('the LISTEN connection lost and back', () => {
  it('clears the caches when the connection is killed, and hears revocations again once it is back', async () => {
    await withB(async (b) => {
      const organizationId = await newOrganization(a.app)
      const missed = await newApiKey(a.app, organizationId, ['files:read'])
      const later = await newApiKey(a.app, organizationId, ['files:read'])
      expect((await scoped(b, missed.headers)).statusCode).toBe(200)
      expect((await scoped(b, later.headers)).statusCode).toBe(200)

      // A revocation nobody announces: B keeps its cached key, as it would after a lost notification.
      await a.app.db
        .updateTable('api_keys')
        .set({ revoked_at: a.clock.now() })
        .where('id', '=', missed.id)
        .execute()
      expect((await scoped(b, missed.headers)).statusCode).toBe(200)

      const { rows } = await sql<{ pid: number }>`
        select pg_terminate_backend(pid) as pid from pg_stat_activity
        where datname = current_database() and application_name = 'platform-core-listen'`.execute(a.app.db)
      expect(rows.length).toBeGreaterThanOrEqual(2)
      // Lost and back: B emptied its caches, so it reads the key again and sees it revoked.
      await refusedOn(b, (app) => scoped(app, missed.headers))
      await pollUntil(
        'both LISTEN connections back',
        async () => {
          const { rows: back } = await sql<{ count: string }>`
            select count(*) as count from pg_stat_activity
            where datname = current_database() and application_name = 'platform-core-listen'`.execute(
            a.app.db,
          )
          return Number(back[0]?.count) >= 2
        },
        20_000,
      )
      // The listener is back: a pushed revocation reaches B again.
      expect((await scoped(b, later.headers)).statusCode).toBe(200)
      await a.app.services.apiKeys.revoke(later.id)
      await refusedOn(b, (app) => scoped(app, later.headers))
    })
  })
})

describe('a dead credential is answered 401, never 403', () => {
  // What another instance sees while a revocation's notification is on its way: the row and the
  // tuples changed by the revoking transaction, the principal still in this instance's cache.
  const revokeBehindTheBack = async (apiKeyId: string) => {
    await a.app.db
      .updateTable('api_keys')
      .set({ revoked_at: a.clock.now() })
      .where('id', '=', apiKeyId)
      .execute()
    await a.app.db
      .deleteFrom('authz_tuples')
      .where('subject_type', '=', 'api_key')
      .where('subject_id', '=', apiKeyId)
      .execute()
  }
  const list = (headers: Record<string, string>) =>
    a.app.inject({ method: 'GET', url: '/api/purchase-requests', headers })

  it('answers a cached API key whose tuples are gone with 401 and drops it from the cache', async () => {
    const organizationId = await newOrganization(a.app)
    const key = await newApiKey(a.app, organizationId, ['purchase_requests:read'])
    await a.app.authz.outbox.runOnce()
    expect((await list(key.headers)).statusCode).toBe(200)
    await revokeBehindTheBack(key.id)
    const res = await list(key.headers)
    expect(res.statusCode).toBe(401)
    expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
    // Dropped: the next request is refused by the guard itself.
    expect((await scoped(a.app, key.headers)).statusCode).toBe(401)
  })

  it('answers a revoked key on a route outside its scopes with 401, not INSUFFICIENT_SCOPE', async () => {
    const organizationId = await newOrganization(a.app)
    const key = await newApiKey(a.app, organizationId, ['files:read'])
    expect((await list(key.headers)).json().code).toBe('INSUFFICIENT_SCOPE')
    await revokeBehindTheBack(key.id)
    expect((await list(key.headers)).statusCode).toBe(401)
  })

  it('keeps 403 for a live credential that lacks the permission', async () => {
    const organizationId = await newOrganization(a.app)
    const key = await newApiKey(a.app, organizationId, ['files:read'])
    const res = await list(key.headers)
    expect(res.statusCode).toBe(403)
    expect(res.json().code).toBe('INSUFFICIENT_SCOPE')
    expect((await scoped(a.app, key.headers)).statusCode).toBe(200)
  })

  it('answers a user whose session was revoked behind the cache with 401', async () => {
    const user = await newUser(a.app)
    const session = await signIn(a.app, user)
    await a.app.authz.outbox.runOnce()
    const ask = () =>
      a.app.inject({
        method: 'GET',
        url: '/api/purchase-requests',
        cookies: { access_token: session.access },
      })
    expect((await ask()).statusCode).toBe(200)
    await a.app.db
      .updateTable('sessions')
      .set({ revoked_at: a.clock.now() })
      .where('id', '=', session.sessionId)
      .execute()
    await a.app.db
      .deleteFrom('authz_tuples')
      .where('subject_type', '=', 'user')
      .where('subject_id', '=', user.id)
      .execute()
    expect((await ask()).statusCode).toBe(401)
  })
})

describe('InvalidatedCache', () => {
  it('does not keep a value loaded while an entry was dropped (the row may predate the revocation)', async () => {
    const cache = new InvalidatedCache<{ revoked: boolean }>({ max: 10, ttl: 60_000 })
    const read = Promise.withResolvers<{ revoked: boolean }>()
    const loading = cache.load('key', () => read.promise)
    cache.delete('key')
    read.resolve({ revoked: false })
    expect(await loading).toEqual({ revoked: false })
    expect(cache.get('key')).toBeUndefined()

    await cache.load('key', async () => ({ revoked: true }))
    expect(cache.get('key')).toEqual({ revoked: true })
  })

  it('drops by value and clears', async () => {
    const cache = new InvalidatedCache<{ user: string }>({ max: 10, ttl: 60_000 })
    for (const [key, user] of [
      ['s1', 'u1'],
      ['s2', 'u1'],
      ['s3', 'u2'],
    ] as const)
      await cache.load(key, async () => ({ user }))
    cache.deleteWhere((value) => value.user === 'u1')
    expect([cache.get('s1'), cache.get('s2'), cache.get('s3')]).toEqual([
      undefined,
      undefined,
      { user: 'u2' },
    ])
    cache.clear()
    expect(cache.size).toBe(0)
  })
})

describe('parseRevocation', () => {
  it('reads what publishRevocation writes and ignores anything malformed', () => {
    const id = randomUUID()
    const hash = 'a'.repeat(64)
    expect(parseRevocation(`session:${id}`)).toEqual({ kind: 'session', id })
    expect(parseRevocation(`user:${id}`)).toEqual({ kind: 'user', id })
    expect(parseRevocation(`service_account:${id}`)).toEqual({ kind: 'service_account', id })
    expect(parseRevocation(`api_key:${hash}`)).toEqual({ kind: 'api_key', keyHash: hash })
    for (const payload of [
      '',
      'session',
      'session:',
      'session:not-a-uuid',
      `api_key:${id}`,
      `other:${id}`,
      hash,
    ])
      expect(parseRevocation(payload)).toBeNull()
  })
})
