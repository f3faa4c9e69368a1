import type { KyselyPlugin } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { currentRequestOrigin } from '../src/context.ts'
import { FAST_LOGIN_CONFIG, newActor, refresh, sessionOf } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// Round trips are the cost of a request: each statement costs about 200 µs of CPU on
// this machine. These pin the statements the hot paths execute, counted as results coming back
// through the app's database (one per executed statement; transactions would add BEGIN and COMMIT)
// while serving a request: what runs beside it (the audit chainer a commit nudged, in a context of
// its own) is not the request's cost.

class StatementCounter implements KyselyPlugin {
  count = 0
  transformQuery: KyselyPlugin['transformQuery'] = (args) => args.node
  transformResult: KyselyPlugin['transformResult'] = async (args) => {
    if (currentRequestOrigin()) this.count++
    return args.result
  }
}

let database: TestDatabase
let t: TestApp
const counter = new StatementCounter()

beforeAll(async () => {
  database = await createTestDatabase()
  const db = database.handle.db.withPlugin(counter)
  t = await createTestApp({
    database: { ...database, handle: { ...database.handle, db } },
    config: FAST_LOGIN_CONFIG,
  })
})

afterAll(async () => {
  await t?.close()
  await database?.dispose()
})

async function counted<T>(work: () => Promise<T>): Promise<{ result: T; statements: number }> {
  await t.app.background.idle()
  await t.app.services.auditChainer.idle()
  counter.count = 0
  const result = await work()
  return { result, statements: counter.count }
}

describe('statements per request', () => {
  it('rotates a refresh token in one statement, its rate-limit hit included', async () => {
    const { session } = await newActor(t.app)
    const { result, statements } = await counted(() => refresh(t.app, session))
    expect(sessionOf(result).userId).toBe(session.userId)
    expect(statements).toBe(1)
  })

  it("answers a permission check in one statement (the parent, with the user's member and admin tuples on it)", async () => {
    const { user, session } = await newActor(t.app)
    const created = await t.app.inject({
      method: 'POST',
      url: '/api/purchase-requests',
      cookies: { access_token: session.access },
      payload: { title: 'Counted' },
    })
    expect(created.statusCode).toBe(201)
    const { statements, result } = await counted(() =>
      t.app.inject({
        method: 'POST',
        url: '/api/authz/check',
        cookies: { access_token: session.access },
        payload: { relation: 'can_view', objectType: 'purchase_request', objectId: created.json().id },
      }),
    )
    expect(result.json()).toMatchObject({ allowed: true })
    expect(statements).toBe(1)
    expect(user.organizationId).toBe(created.json().organizationId)
  })

  it("reads a purchase request of the caller's organization and checks can_view in one statement", async () => {
    const { session } = await newActor(t.app)
    const created = await t.app.inject({
      method: 'POST',
      url: '/api/purchase-requests',
      cookies: { access_token: session.access },
      payload: { title: 'Read with its check' },
    })
    expect(created.statusCode).toBe(201)
    const { statements, result } = await counted(() =>
      t.app.inject({
        method: 'GET',
        url: `/api/purchase-requests/${created.json().id}`,
        cookies: { access_token: session.access },
      }),
    )
    expect(result.json()).toEqual(created.json())
    expect(statements).toBe(1)
  })

  it("lists the user's sessions in one statement", async () => {
    const { session } = await newActor(t.app)
    const { statements, result } = await counted(() =>
      t.app.inject({ method: 'GET', url: '/api/auth/sessions', cookies: { access_token: session.access } }),
    )
    expect(result.json()).toMatchObject([{ sessionId: session.sessionId, current: true }])
    expect(statements).toBe(1)
  })

  it('creates a purchase request in three statements: the membership, the tuple, the row with its audit event', async () => {
    const { session } = await newActor(t.app)
    const { statements, result } = await counted(() =>
      t.app.inject({
        method: 'POST',
        url: '/api/purchase-requests',
        cookies: { access_token: session.access },
        payload: { title: 'Counted create' },
      }),
    )
    expect(result.statusCode).toBe(201)
    expect(statements).toBe(3)
  })

  it("submits the creator's purchase request in two statements: the read with its check, the move with its history and audit event", async () => {
    const { session } = await newActor(t.app)
    const created = await t.app.inject({
      method: 'POST',
      url: '/api/purchase-requests',
      cookies: { access_token: session.access },
      payload: { title: 'Counted submit' },
    })
    expect(created.statusCode).toBe(201)
    const { statements, result } = await counted(() =>
      t.app.inject({
        method: 'POST',
        url: `/api/purchase-requests/${created.json().id}/submit`,
        cookies: { access_token: session.access },
      }),
    )
    expect(result.json()).toMatchObject({ status: 'SUBMITTED' })
    expect(statements).toBe(2)
  })

  it('answers GET /api/auth/me in one statement (the account, its organization and its passkey count)', async () => {
    const { user, session } = await newActor(t.app)
    const { statements, result } = await counted(() =>
      t.app.inject({ method: 'GET', url: '/api/auth/me', cookies: { access_token: session.access } }),
    )
    expect(result.json()).toMatchObject({ userId: user.id, sessionId: session.sessionId, passkeyCount: 0 })
    expect(statements).toBe(1)
  })
})
