import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { userAccessToken } from './helpers/accounts.ts'
import { createTestAppForTest } from './helpers/app.ts'

// /metrics is not readable anonymously under the production profile: with
// platform.metrics.bearer-token it needs that token; under production without one it is not served.

const PRODUCTION = {
  'platform.profile': 'production',
  'platform.datasource.url': 'postgres://unused/db',
  'platform.mail.smtp.url': 'smtp://127.0.0.1:1',
  'platform.authz.openfga.api-url': 'http://127.0.0.1:1',
  'platform.authz.openfga.store-id': '01ARZ3NDEKTSV4RRFFQ69G5FAV',
  'platform.authz.openfga.model-id': '01ARZ3NDEKTSV4RRFFQ69G5FAW',
}
const TOKEN = 'a-long-random-metrics-token'

describe('/metrics access', () => {
  it('needs the configured bearer token: none, a wrong one and a user cookie are 401', async () => {
    const t = await createTestAppForTest({
      config: { ...PRODUCTION, 'platform.metrics.bearer-token': TOKEN },
    })
    const ok = await t.app.inject({
      method: 'GET',
      url: '/metrics',
      headers: { authorization: `Bearer ${TOKEN}` },
    })
    expect(ok.statusCode).toBe(200)
    expect(ok.body).toContain('http_request_duration_seconds')
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: `Bearer ${TOKEN}x` }]) {
      const res = await t.app.inject({ method: 'GET', url: '/metrics', headers })
      expect(res.statusCode).toBe(401)
      expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
    }
    const cookie = { access_token: userAccessToken(t.app, randomUUID()) }
    expect((await t.app.inject({ method: 'GET', url: '/metrics', cookies: cookie })).statusCode).toBe(401)
  })

  it('is not served under production without a token', async () => {
    const t = await createTestAppForTest({ config: PRODUCTION })
    const anonymous = await t.app.inject({ method: 'GET', url: '/metrics' })
    expect(anonymous.statusCode).toBe(401)
    const cookie = { access_token: userAccessToken(t.app, randomUUID()) }
    expect((await t.app.inject({ method: 'GET', url: '/metrics', cookies: cookie })).statusCode).toBe(404)
  })

  it('stays open outside production when no token is set (development)', async () => {
    const t = await createTestAppForTest()
    expect((await t.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(200)
  })

  it("reports each outbox's pending rows and dead letters, read from the database", async () => {
    const t = await createTestAppForTest()
    const gauge = async (kind: string, state: string) => {
      const body = (await t.app.inject({ method: 'GET', url: '/metrics' })).body
      const line = body
        .split('\n')
        .find((l) => l.startsWith(`outbox_messages{kind="${kind}",state="${state}"}`))
      return Number(line?.split(' ').pop())
    }
    const before = { pending: await gauge('mail', 'pending'), dead: await gauge('mail', 'dead_letter') }
    const now = new Date()
    const row = { template: 'password_changed', recipient: 'a@example.com', data: '{}', created_at: now }
    await t.app.db
      .insertInto('mail_outbox')
      .values([
        { ...row, next_attempt_at: new Date(now.getTime() + 3_600_000) },
        { ...row, next_attempt_at: now, failed_at: now, last_error: 'gave up' },
      ])
      .execute()
    expect(await gauge('mail', 'pending')).toBe(before.pending + 1)
    expect(await gauge('mail', 'dead_letter')).toBe(before.dead + 1)
    expect(await gauge('authz', 'dead_letter')).toBeGreaterThanOrEqual(0)
  })
})
