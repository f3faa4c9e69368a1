import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { CredentialAuthenticator } from '../src/features/sessions/authentication.ts'
import { cookie, newUser, PASSWORD, type TestUser, UUID } from './helpers/accounts.ts'
import { buildAppBeside, createTestApp, useTestApp, useTestAppBeside } from './helpers/app.ts'

// POST /api/auth/login over HTTP: the access and refresh cookies, the session response (userId,
// organizationId, sessionId), indistinguishable failures (wrong password, unknown or deactivated
// account), rate limits, re-hashing and the credential-authenticator extension point.

const THIRTY_DAYS = 30 * 24 * 60 * 60

// The rate limit of the shared app is raised so that only the rate-limit tests meet it.
const t = useTestApp({ config: { 'platform.auth.rate-limit.login-per-minute': '1000' } })

type Account = TestUser

/** A member of a new organization with this email. */
const newAccount = (app: FastifyInstance, email: string): Promise<Account> => newUser(app, { email })

function login(
  app: FastifyInstance,
  username: string,
  password = PASSWORD,
  options: { remoteAddress?: string; headers?: Record<string, string> } = {},
) {
  return app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: { username, password },
    ...options,
  })
}

const storedAccount = (app: FastifyInstance, id: string) =>
  app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

describe('login', () => {
  it('sets exactly the access and refresh cookies, and answers only who signed in', async () => {
    const account = await newAccount(t.app, 'cookies@example.com')
    const res = await login(t.app, account.email)

    expect(res.statusCode).toBe(200)
    expect(res.cookies.map((c) => c.name).sort()).toEqual(['access_token', 'refresh_token'])
    const access = cookie(res, 'access_token')
    const refresh = cookie(res, 'refresh_token')
    expect(access).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Lax', path: '/', maxAge: 720 })
    expect(refresh).toMatchObject({
      httpOnly: true,
      secure: true,
      sameSite: 'Lax',
      path: '/api/auth',
      maxAge: THIRTY_DAYS,
    })
    expect(access?.domain).toBeUndefined()
    expect(refresh?.domain).toBeUndefined()

    expect(res.json()).toEqual({
      userId: account.id,
      organizationId: account.organizationId,
      sessionId: expect.stringMatching(UUID),
    })
    expect(res.body).not.toContain(access?.value)
    expect(res.body).not.toContain(refresh?.value)
    expect(res.body).not.toMatch(/token/i)

    const sessions = await t.app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: access?.value ?? '' },
    })
    expect(sessions.statusCode).toBe(200)
  })

  it('follows the configured access-cookie name, SameSite and Secure flag', async () => {
    const custom = await createTestApp({
      database: t.database,
      config: {
        'platform.auth.rate-limit.login-per-minute': '1000',
        'platform.auth.cookie.access-token-name': 'app_session',
        'platform.auth.cookie.same-site': 'Strict',
        'platform.auth.cookie.secure': 'false',
      },
    })
    try {
      const account = await newAccount(custom.app, 'custom-cookie@example.com')
      const res = await login(custom.app, account.email)
      expect(res.statusCode).toBe(200)
      expect(res.cookies.map((c) => c.name).sort()).toEqual(['app_session', 'refresh_token'])
      const access = cookie(res, 'app_session')
      expect(access).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/', maxAge: 720 })
      expect(access?.secure).toBeFalsy()
      // The refresh cookie stays SameSite=Lax on /api/auth whatever the access cookie's settings.
      const refresh = cookie(res, 'refresh_token')
      expect(refresh).toMatchObject({ httpOnly: true, sameSite: 'Lax', path: '/api/auth' })
      expect(refresh?.secure).toBeFalsy()
      for (const header of [res.headers['set-cookie']].flat()) expect(header).not.toMatch(/;\s*Secure/i)

      const byName = (name: string) =>
        custom.app.inject({
          method: 'GET',
          url: '/api/auth/sessions',
          cookies: { [name]: access?.value ?? '' },
        })
      expect((await byName('app_session')).statusCode).toBe(200)
      expect((await byName('access_token')).statusCode).toBe(401)
    } finally {
      await custom.close()
    }
  })

  it('answers an unknown email, a wrong password and a deactivated account with the same 401', async () => {
    const account = await newAccount(t.app, 'known@example.com')
    const deactivated = await newAccount(t.app, 'deactivated@example.com')
    await t.app.db.updateTable('accounts').set({ active: false }).where('id', '=', deactivated.id).execute()

    const responses = [
      await login(t.app, 'nobody@example.com'),
      await login(t.app, account.email, 'wrong password, long enough'),
      await login(t.app, deactivated.email),
      await login(t.app, deactivated.email, 'wrong password, long enough'),
    ]
    const [first] = responses
    expect(first?.statusCode).toBe(401)
    expect(first?.json()).toMatchObject({ code: 'INVALID_CREDENTIALS', status: 401 })
    for (const res of responses) {
      expect(res.statusCode).toBe(401)
      expect(res.headers['content-type']).toBe(first?.headers['content-type'])
      expect(res.json()).toEqual(first?.json())
      expect(res.headers['set-cookie']).toBeUndefined()
    }
  })

  it('matches the email case-insensitively', async () => {
    const account = await newAccount(t.app, 'Mixed.Case@Example.com')
    for (const username of ['MIXED.CASE@EXAMPLE.COM', 'mixed.case@example.com', ' Mixed.Case@Example.com ']) {
      const res = await login(t.app, username)
      expect(res.statusCode).toBe(200)
      expect(res.json().userId).toBe(account.id)
    }
  })

  it('answers a login without a password with 400 VALIDATION_FAILED', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { username: 'someone@example.com' },
    })
    expect(res.statusCode).toBe(400)
    expect(res.json()).toMatchObject({
      code: 'VALIDATION_FAILED',
      errors: [{ path: 'body.password', message: 'is required' }],
    })
    expect(res.headers['set-cookie']).toBeUndefined()
  })

  it("records the session's user agent and client IP, listed in GET /api/auth/sessions", async () => {
    const account = await newAccount(t.app, 'device@example.com')
    const res = await login(t.app, account.email, PASSWORD, {
      remoteAddress: '198.51.100.23',
      headers: { 'user-agent': 'LoginTest/1.0 (vitest)' },
    })
    expect(res.statusCode).toBe(200)
    const { sessionId } = res.json()
    const list = await t.app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: cookie(res, 'access_token')?.value ?? '' },
    })
    expect(list.statusCode).toBe(200)
    expect(list.json()).toEqual([
      expect.objectContaining({
        sessionId,
        userAgent: 'LoginTest/1.0 (vitest)',
        ipAddress: '198.51.100.23',
        current: true,
      }),
    ])
  })
})

describe('login rate limits', () => {
  const limited = useTestAppBeside(t, { config: { 'platform.auth.rate-limit.login-per-minute': '3' } })

  const expectRateLimited = (res: LightMyRequestResponse) => {
    expect(res.statusCode).toBe(429)
    expect(res.json().code).toBe('RATE_LIMITED')
    const retryAfter = Number(res.headers['retry-after'])
    expect(Number.isInteger(retryAfter)).toBe(true)
    expect(retryAfter).toBeGreaterThanOrEqual(1)
    expect(retryAfter).toBeLessThanOrEqual(60)
    expect(res.headers['set-cookie']).toBeUndefined()
  }

  it('answers the 4th login from one IP within a minute with 429 and Retry-After, even with the right password', async () => {
    const account = await newAccount(limited.app, 'ip-limit@example.com')
    const remoteAddress = '203.0.113.10'
    for (const username of ['a@example.com', 'b@example.com', 'c@example.com']) {
      const res = await login(limited.app, username, PASSWORD, { remoteAddress })
      expect(res.statusCode).toBe(401)
    }
    expectRateLimited(await login(limited.app, account.email, PASSWORD, { remoteAddress }))
    // Another IP is not affected.
    const other = await login(limited.app, account.email, PASSWORD, { remoteAddress: '203.0.113.11' })
    expect(other.statusCode).toBe(200)
  })

  it('counts only failed logins per IP: 10 colleagues behind one address all sign in', async () => {
    const remoteAddress = '203.0.113.50'
    for (let i = 0; i < 10; i++) {
      const colleague = await newAccount(limited.app, `colleague-${i}@example.com`)
      expect((await login(limited.app, colleague.email, PASSWORD, { remoteAddress })).statusCode).toBe(200)
    }
    for (let i = 0; i < 3; i++) {
      expect(
        (await login(limited.app, `nobody-${i}@example.com`, PASSWORD, { remoteAddress })).statusCode,
      ).toBe(401)
    }
    const late = await newAccount(limited.app, 'late-colleague@example.com')
    expectRateLimited(await login(limited.app, late.email, PASSWORD, { remoteAddress }))
  })

  it('answers the 4th login for one account from different IPs within a minute with 429', async () => {
    const account = await newAccount(limited.app, 'account-limit@example.com')
    for (const remoteAddress of ['203.0.113.21', '203.0.113.22', '203.0.113.23']) {
      const res = await login(limited.app, account.email, PASSWORD, { remoteAddress })
      expect(res.statusCode).toBe(200)
    }
    // Counted per account whatever the case of the email.
    expectRateLimited(
      await login(limited.app, account.email.toUpperCase(), PASSWORD, { remoteAddress: '203.0.113.24' }),
    )
  })

  it('does not count rate-limited attempts as failed passwords (checked before hashing)', async () => {
    const account = await newAccount(limited.app, 'limit-before-hash@example.com')
    const remoteAddress = '203.0.113.40'
    for (let i = 0; i < 3; i++) {
      expect((await login(limited.app, account.email, 'wrong password!', { remoteAddress })).statusCode).toBe(
        401,
      )
    }
    for (let i = 0; i < 3; i++) {
      expectRateLimited(await login(limited.app, account.email, 'wrong password!', { remoteAddress }))
    }
    expect((await storedAccount(limited.app, account.id)).failed_attempts).toBe(3)
  })

  it('lets logins through again once the minute has passed', async () => {
    const account = await newAccount(limited.app, 'window@example.com')
    const remoteAddress = '203.0.113.30'
    for (let i = 0; i < 3; i++) {
      expect((await login(limited.app, account.email, PASSWORD, { remoteAddress })).statusCode).toBe(200)
    }
    expectRateLimited(await login(limited.app, account.email, PASSWORD, { remoteAddress }))
    limited.clock.advanceSeconds(60)
    const res = await login(limited.app, account.email, PASSWORD, { remoteAddress })
    expect(res.statusCode).toBe(200)
  })
})

describe('password re-hash', () => {
  it('re-hashes the stored password at login when the argon2 parameters have changed', async () => {
    const older = await createTestApp({
      database: t.database,
      config: { 'platform.auth.password.hash-iterations': '1' },
    })
    let account: Account
    try {
      account = await newAccount(older.app, 'rehash@example.com')
    } finally {
      await older.close()
    }
    expect((await storedAccount(t.app, account.id)).password_hash).toMatch(
      /\$argon2id\$v=19\$m=\d+,t=1,p=\d+\$/,
    )

    expect((await login(t.app, account.email)).statusCode).toBe(200)
    const rehashed = (await storedAccount(t.app, account.id)).password_hash
    expect(rehashed).toMatch(/\$argon2id\$v=19\$m=\d+,t=2,p=\d+\$/)
    // The new hash still matches the same password, and is not replaced again.
    expect((await login(t.app, account.email)).statusCode).toBe(200)
    expect((await storedAccount(t.app, account.id)).password_hash).toBe(rehashed)
  })
})

describe('credential authenticator extension point', () => {
  const DEMO_USER = '11111111-2222-4333-8444-555555555555'
  const DEMO_ORG = '66666666-7777-4888-9999-aaaaaaaaaaaa'
  const authenticator: CredentialAuthenticator = {
    authenticate: async ({ username, password }) =>
      username === 'demo' && password === 'demo-password'
        ? { userId: DEMO_USER, organizationId: DEMO_ORG }
        : null,
  }
  let app: FastifyInstance

  beforeAll(async () => {
    // The harness's object store of the file's main app serves this one too. Rate-limit counters live
    // in the shared database; keep this app clear of the others' counts.
    app = await buildAppBeside(t, { 'platform.auth.rate-limit.login-per-minute': '1000' }, { authenticator })
  })

  afterAll(async () => {
    await app?.close()
  })

  it('signs in the user the custom authenticator accepts, and refresh works for that user', async () => {
    const res = await login(app, 'demo', 'demo-password')
    expect(res.statusCode).toBe(200)
    const { sessionId } = res.json()
    expect(res.json()).toEqual({
      userId: DEMO_USER,
      organizationId: DEMO_ORG,
      sessionId: expect.stringMatching(UUID),
    })

    const refreshed = await app.inject({
      method: 'POST',
      url: '/api/auth/refresh',
      cookies: { refresh_token: cookie(res, 'refresh_token')?.value ?? '' },
    })
    expect(refreshed.statusCode).toBe(200)
    expect(refreshed.json()).toEqual({ userId: DEMO_USER, organizationId: DEMO_ORG, sessionId })
    const access = cookie(refreshed, 'access_token')?.value ?? ''
    expect(access).not.toBe('')

    const list = await app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: access },
    })
    expect(list.statusCode).toBe(200)
    expect(list.json()).toEqual([expect.objectContaining({ sessionId, current: true })])
  })

  it('answers any other credentials with 401 INVALID_CREDENTIALS, account-table users included', async () => {
    const account = await newAccount(t.app, 'replaced@example.com')
    for (const [username, password] of [
      ['demo', 'wrong-password'],
      ['someone', 'demo-password'],
      [account.email, PASSWORD],
    ] as const) {
      const res = await login(app, username, password)
      expect(res.statusCode).toBe(401)
      expect(res.json().code).toBe('INVALID_CREDENTIALS')
    }
  })
})
