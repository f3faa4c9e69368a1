import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { REVOCATION_CHANNEL } from '../src/security/revocation.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, type Session, signIn } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// The instance that ends access refuses the ended credentials from its answer on, without waiting
// for its own notification to come back over its LISTEN connection (src/security/revocation.ts).
// This instance's LISTEN connection never delivers a revocation: only the in-process path can drop
// what its caches hold before they expire (`platform.auth.revocation.fallback-ttl`).

let database: TestDatabase
let t: TestApp

beforeAll(async () => {
  database = await createTestDatabase()
  const { handle } = database
  const deaf: typeof handle.listen = (channel, onMessage) =>
    handle.listen(channel, (payload) => {
      if (channel !== REVOCATION_CHANNEL) onMessage(payload)
    })
  t = await createTestApp({
    database: { ...database, handle: { ...handle, listen: deaf } },
    config: { ...ACCOUNT_TEST_CONFIG, 'platform.auth.session-version.enabled': 'true' },
  })
})

afterAll(async () => {
  await t?.close()
  await database?.dispose()
})

const me = (session: Session) => asUser(t.app, session, { method: 'GET', url: '/api/auth/me' })

describe('revocations on the instance that makes them', () => {
  it('refuses the access tokens of every session at once after logout-all', async () => {
    const user = await newUser(t.app)
    const first = await signIn(t.app, user)
    const second = await signIn(t.app, user)
    // Both sessions' states are cached now.
    expect((await me(first)).statusCode).toBe(200)
    expect((await me(second)).statusCode).toBe(200)
    const res = await asUser(t.app, first, { method: 'POST', url: '/api/auth/logout-all' })
    expect(res.statusCode).toBe(204)
    expect((await me(first)).statusCode).toBe(401)
    expect((await me(second)).statusCode).toBe(401)
  })

  it('refuses the access token of one revoked session at once, and keeps the other', async () => {
    const user = await newUser(t.app)
    const kept = await signIn(t.app, user)
    const ended = await signIn(t.app, user)
    expect((await me(ended)).statusCode).toBe(200)
    const res = await asUser(t.app, kept, { method: 'DELETE', url: `/api/auth/sessions/${ended.sessionId}` })
    expect(res.statusCode).toBe(204)
    expect((await me(ended)).statusCode).toBe(401)
    expect((await me(kept)).statusCode).toBe(200)
  })
})
