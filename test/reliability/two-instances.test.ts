import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type Actor,
  asUser,
  expectProblem,
  FAST_LOGIN_CONFIG,
  login,
  newActor,
  refresh,
  sessionOf,
} from '../helpers/accounts.ts'
import { createTestApp, type TestApp, testSecret } from '../helpers/app.ts'

// Two instances on one database, as behind a load balancer: requests alternate between
// them, and each guarantee must hold as if there were one service.

describe('two instances on one database', () => {
  let a: TestApp
  let b: TestApp

  beforeAll(async () => {
    // One deployment: the same configuration, the JWT secret included.
    const config = {
      ...FAST_LOGIN_CONFIG,
      'platform.auth.jwt.secret': testSecret(),
      'platform.auth.rate-limit.login-per-minute': '4',
    }
    a = await createTestApp({ config })
    b = await createTestApp({ config, database: a.database })
  }, 60_000)

  afterAll(async () => {
    await b?.close()
    await a?.close()
  })

  it('shares the per-IP login limit: failures on both count against one budget', async () => {
    const remoteAddress = '198.51.100.7'
    const fail = (t: TestApp) =>
      t.app.inject({
        method: 'POST',
        url: '/api/auth/login',
        remoteAddress,
        payload: { username: 'nobody@example.com', password: 'wrong' },
      })
    for (const t of [a, b, a, b]) expect((await fail(t)).statusCode).toBe(401)
    expectProblem(await fail(a), 429, 'RATE_LIMITED')
    expectProblem(await fail(b), 429, 'RATE_LIMITED')
  })

  it('refuses on one instance a session logged out on the other', async () => {
    const { user } = await newActor(a.app)
    const session = sessionOf(await login(a.app, user.email, user.password))
    const out = await a.app.inject({
      method: 'POST',
      url: '/api/auth/logout',
      cookies: { refresh_token: session.refresh },
    })
    expect(out.statusCode).toBe(204)
    expect((await refresh(b.app, session)).statusCode).toBe(401)
  })

  it('revokes the session on both when a rotated token is replayed on the other instance', async () => {
    const { user } = await newActor(a.app)
    const first = sessionOf(await login(a.app, user.email, user.password))
    const rotated = await refresh(a.app, first)
    expect(rotated.statusCode).toBe(200)
    expectProblem(await refresh(b.app, first), 401, 'REFRESH_TOKEN_REUSED')
    // The thief's replay on B revoked the session the owner holds on A.
    expect((await refresh(a.app, sessionOf(rotated))).statusCode).toBe(401)
  })

  it('approves once of 50 parallel approvals split across both: one APPROVED, one audit row, one email', async () => {
    const creator = await newActor(a.app)
    const admin = await newActor(a.app, { organizationId: creator.user.organizationId, role: 'admin' })
    const created = await asUser(a.app, creator.session, {
      method: 'POST',
      url: '/api/purchase-requests',
      payload: { title: 'Two instances' },
    })
    const id = created.json().id
    const submitted = await asUser(b.app, creator.session, {
      method: 'POST',
      url: `/api/purchase-requests/${id}/submit`,
    })
    expect(submitted.statusCode).toBe(200)
    const approve = (t: TestApp, who: Actor) =>
      asUser(t.app, who.session, { method: 'POST', url: `/api/purchase-requests/${id}/approve` })
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => approve(i % 2 ? b : a, admin)))
    const statuses = answers.map((r) => r.statusCode)
    expect(statuses.filter((s) => s === 200)).toHaveLength(1)
    expect(statuses.filter((s) => s === 409)).toHaveLength(49)
    const count = async (query: ReturnType<typeof sql>) => Number((await query.execute(a.app.db)).rows.length)
    expect(
      await count(
        sql`select 1 from purchase_request_events where purchase_request_id = ${id} and action = 'approve'`,
      ),
    ).toBe(1)
    expect(
      await count(
        sql`select 1 from mail_outbox where template = 'purchase_request_approved' and recipient = ${creator.user.email}`,
      ),
    ).toBe(1)
  }, 60_000)
})
