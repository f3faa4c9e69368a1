import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { userAccessToken } from './helpers/accounts.ts'
import { createTestAppForTest, useTestApp } from './helpers/app.ts'

// Security headers on every response, errors included, from @fastify/helmet; the
// interactive docs keep working under their own policy.

const t = useTestApp()

function expectSecurityHeaders(headers: Record<string, unknown>) {
  expect(headers['x-content-type-options']).toBe('nosniff')
  expect(headers['referrer-policy']).toBe('no-referrer')
  expect(headers['x-frame-options']).toBe('DENY')
  expect(String(headers['content-security-policy'])).toContain("frame-ancestors 'none'")
}

describe('security headers', () => {
  it('are on a success, a 401, a 404 and a validation error', async () => {
    const signedIn = { access_token: userAccessToken(t.app, randomUUID()) }
    const answers = [
      await t.app.inject({ method: 'GET', url: '/health/live' }),
      await t.app.inject({ method: 'GET', url: '/api/auth/sessions' }),
      await t.app.inject({ method: 'GET', url: '/api/nothing-here', cookies: signedIn }),
      await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: {} }),
    ]
    expect(answers.map((res) => res.statusCode)).toEqual([200, 401, 404, 400])
    for (const res of answers) {
      expectSecurityHeaders(res.headers)
      expect(res.headers['content-security-policy']).toContain("default-src 'none'")
    }
  })

  it('send HSTS when cookies are Secure, and not over plain-HTTP development', async () => {
    const secure = await t.app.inject({ method: 'GET', url: '/health/live' })
    expect(t.config.auth.cookie.secure).toBe(true)
    expect(secure.headers['strict-transport-security']).toMatch(/max-age=\d+/)
    const plain = await createTestAppForTest({ config: { 'platform.auth.cookie.secure': 'false' } })
    const res = await plain.app.inject({ method: 'GET', url: '/health/live' })
    expect(res.headers['strict-transport-security']).toBeUndefined()
  })

  it("let /docs load Swagger UI's scripts and styles, framed by no one", async () => {
    const page = await t.app.inject({ method: 'GET', url: '/docs/' })
    expect(page.statusCode).toBe(200)
    const policy = String(page.headers['content-security-policy'])
    expect(policy).toMatch(/script-src 'self'/)
    expect(policy).toMatch(/style-src 'self'/)
    expect(policy).toContain("frame-ancestors 'none'")
    expect(policy).not.toContain('upgrade-insecure-requests')
    expect(page.headers['x-content-type-options']).toBe('nosniff')
    for (const asset of ['/docs/static/swagger-ui-bundle.js', '/docs/static/swagger-initializer.js']) {
      expect((await t.app.inject({ method: 'GET', url: asset })).statusCode, asset).toBe(200)
    }
  })
})
