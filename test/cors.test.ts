import { describe, expect, it } from 'vitest'
import { createTestAppForTest, type TestApp } from './helpers/app.ts'

const preflight = (t: TestApp, origin: string) =>
  t.app.inject({
    method: 'OPTIONS',
    url: '/api/auth/login',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'content-type',
    },
  })

describe('cross-origin requests', () => {
  it('sends no CORS headers by default, so browsers refuse cross-origin calls', async () => {
    const t = await createTestAppForTest()
    const res = await t.app.inject({
      method: 'GET',
      url: '/health/live',
      headers: { origin: 'https://evil.example' },
    })
    expect(res.headers['access-control-allow-origin']).toBeUndefined()
    expect(res.headers['access-control-allow-credentials']).toBeUndefined()
  })

  it('allows credentials only for the listed origins', async () => {
    const t = await createTestAppForTest({
      config: { 'platform.web.cors.allowed-origins': 'https://app.example,https://admin.example' },
    })
    const allowed = await preflight(t, 'https://app.example')
    expect(allowed.statusCode).toBe(204)
    expect(allowed.headers['access-control-allow-origin']).toBe('https://app.example')
    expect(allowed.headers['access-control-allow-credentials']).toBe('true')
    expect(allowed.headers['access-control-allow-methods']).toContain('POST')

    const refused = await preflight(t, 'https://evil.example')
    // Without Access-Control-Allow-Origin the browser refuses the response, credentials or not.
    expect(refused.headers['access-control-allow-origin']).toBeUndefined()

    const simple = await t.app.inject({
      method: 'GET',
      url: '/health/live',
      headers: { origin: 'https://admin.example' },
    })
    expect(simple.headers['access-control-allow-origin']).toBe('https://admin.example')
    expect(simple.headers['access-control-expose-headers']).toContain('x-request-id')
  })
})
