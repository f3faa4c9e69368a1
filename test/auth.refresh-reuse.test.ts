import { randomUUID } from 'node:crypto'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { PlatformEvents } from '../src/events.ts'
import {
  cookie,
  FAST_LOGIN_CONFIG,
  newUser as newTestUser,
  type OrganizationSession,
  PASSWORD,
} from './helpers/accounts.ts'
import { useTestApp, useTestAppBeside } from './helpers/app.ts'

// Refresh token and session states, their wire answers and strict rotation, through HTTP only:
// every token a test uses comes from a Set-Cookie header.

const DAY = 86_400
const HOUR = 3_600

// Cheap password hashing and generous limits: this file logs in and refreshes many times per minute.
const t = useTestApp({
  config: { ...FAST_LOGIN_CONFIG, 'platform.auth.rate-limit.refresh-per-minute': '1000' },
})

type Login = OrganizationSession

type RevokedEvent = PlatformEvents['UserSessionsRevokedEvent']

function cookieValue(res: LightMyRequestResponse, name: string): string {
  const value = cookie(res, name)?.value
  expect(value, `${name} cookie`).toBeTruthy()
  return value as string
}

function expectCookiesCleared(res: LightMyRequestResponse): void {
  for (const [name, path] of [
    ['access_token', '/'],
    ['refresh_token', '/api/auth'],
  ] as const) {
    const cleared = cookie(res, name)
    expect(cleared, `${name} cleared`).toBeDefined()
    expect(cleared?.value).toBe('')
    expect(cleared?.maxAge).toBe(0)
    expect(cleared?.expires?.getTime()).toBe(0)
    expect(cleared?.path).toBe(path)
  }
}

function expectProblem(res: LightMyRequestResponse, status: number, code: string): void {
  expect(res.statusCode).toBe(status)
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
  expect(res.json().code).toBe(code)
}

/** A new member (of a new organization unless one is given); answers their email. */
async function newUser(app: FastifyInstance, organizationId?: string): Promise<string> {
  return (await newTestUser(app, { organizationId })).email
}

async function login(
  app: FastifyInstance,
  email: string,
  options: { userAgent?: string; remoteAddress?: string } = {},
): Promise<Login> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: { username: email, password: PASSWORD },
    headers: options.userAgent ? { 'user-agent': options.userAgent } : {},
    ...(options.remoteAddress ? { remoteAddress: options.remoteAddress } : {}),
  })
  expect(res.statusCode).toBe(200)
  return {
    ...res.json(),
    access: cookieValue(res, 'access_token'),
    refresh: cookieValue(res, 'refresh_token'),
  }
}

const refresh = (app: FastifyInstance, token?: string, remoteAddress?: string) =>
  app.inject({
    method: 'POST',
    url: '/api/auth/refresh',
    ...(token === undefined ? {} : { cookies: { refresh_token: token } }),
    ...(remoteAddress ? { remoteAddress } : {}),
  })

const listSessions = (access: string) =>
  t.app.inject({ method: 'GET', url: '/api/auth/sessions', cookies: { access_token: access } })

const sessionRow = (id: string) =>
  t.app.db.selectFrom('sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

function recordEvents(): RevokedEvent[] {
  const seen: RevokedEvent[] = []
  onTestFinished(t.app.services.events.on('UserSessionsRevokedEvent', (event) => void seen.push(event)))
  return seen
}

describe('refresh token rotation', () => {
  it('rotates an active token: 200 with the session and a new cookie pair', async () => {
    const session = await login(t.app, await newUser(t.app))
    t.clock.advanceSeconds(60)
    const res = await refresh(t.app, session.refresh)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      userId: session.userId,
      organizationId: session.organizationId,
      sessionId: session.sessionId,
    })
    expect(res.headers['cache-control']).toBe('no-store')
    const access = cookie(res, 'access_token')
    const next = cookie(res, 'refresh_token')
    expect(access).toMatchObject({ path: '/', httpOnly: true, secure: true, sameSite: 'Lax', maxAge: 720 })
    expect(access?.value).toBeTruthy()
    expect(access?.value).not.toBe(session.access)
    expect(next).toMatchObject({ path: '/api/auth', httpOnly: true, secure: true, sameSite: 'Lax' })
    expect(next?.maxAge).toBe(30 * DAY)
    expect(next?.value).toBeTruthy()
    expect(next?.value).not.toBe(session.refresh)
    expect(res.body).not.toContain(next?.value)

    // The new pair works: the access cookie authenticates, the refresh cookie rotates again.
    expect((await listSessions(access?.value as string)).statusCode).toBe(200)
    expect((await refresh(t.app, next?.value)).statusCode).toBe(200)
  })

  it('revokes the whole session, its newest token included, when a rotated token is presented again', async () => {
    const session = await login(t.app, await newUser(t.app))
    const second = cookieValue(await refresh(t.app, session.refresh), 'refresh_token')
    const thirdRes = await refresh(t.app, second)
    const newest = cookieValue(thirdRes, 'refresh_token')
    const newestAccess = cookieValue(thirdRes, 'access_token')
    const events = recordEvents()

    const reuse = await refresh(t.app, session.refresh)
    expectProblem(reuse, 401, 'REFRESH_TOKEN_REUSED')
    expectCookiesCleared(reuse)
    expect(events).toEqual([{ userId: session.userId, reason: 'refresh_token_reuse_detected' }])

    expectProblem(await refresh(t.app, newest), 401, 'REFRESH_TOKEN_INVALID')
    const row = await sessionRow(session.sessionId)
    expect(row.revoked_at).toEqual(t.clock.now())
    expect(row.revoked_reason).toBe('refresh_token_reuse_detected')
    const active = await t.app.db
      .selectFrom('refresh_tokens')
      .select('id')
      .where('session_id', '=', session.sessionId)
      .where('revoked_at', 'is', null)
      .execute()
    expect(active).toEqual([])
    // Without a session-version provider the access token outlives the session until it expires,
    // but the session is gone.
    const list = await listSessions(newestAccess)
    expect(list.json().map((s: { sessionId: string }) => s.sessionId)).not.toContain(session.sessionId)
  })

  it('treats a rotated token presented 40 days later as reuse', async () => {
    const session = await login(t.app, await newUser(t.app))
    expect((await refresh(t.app, session.refresh)).statusCode).toBe(200)
    t.clock.advanceSeconds(40 * DAY)
    const events = recordEvents()

    const res = await refresh(t.app, session.refresh)
    expectProblem(res, 401, 'REFRESH_TOKEN_REUSED')
    expect(events).toEqual([{ userId: session.userId, reason: 'refresh_token_reuse_detected' }])
    expect((await sessionRow(session.sessionId)).revoked_reason).toBe('refresh_token_reuse_detected')
  })

  it('leaves the other sessions of the user untouched when one session is revoked for reuse', async () => {
    const email = await newUser(t.app)
    const laptop = await login(t.app, email)
    const phone = await login(t.app, email)
    expect((await refresh(t.app, laptop.refresh)).statusCode).toBe(200)
    expectProblem(await refresh(t.app, laptop.refresh), 401, 'REFRESH_TOKEN_REUSED')

    const phoneRes = await refresh(t.app, phone.refresh)
    expect(phoneRes.statusCode).toBe(200)
    expect((await sessionRow(phone.sessionId)).revoked_at).toBeNull()
    const list = await listSessions(cookieValue(phoneRes, 'access_token'))
    expect(list.json().map((s: { sessionId: string }) => s.sessionId)).toEqual([phone.sessionId])
  })

  it('answers REFRESH_TOKEN_INVALID without a cookie', async () => {
    const res = await refresh(t.app)
    expectProblem(res, 401, 'REFRESH_TOKEN_INVALID')
    expectCookiesCleared(res)
  })

  it('answers REFRESH_TOKEN_INVALID for an unknown token, without publishing an event', async () => {
    const events = recordEvents()
    const res = await refresh(t.app, 'x'.repeat(43))
    expectProblem(res, 401, 'REFRESH_TOKEN_INVALID')
    expectCookiesCleared(res)
    expect(events).toEqual([])
  })

  it('answers REFRESH_TOKEN_INVALID for a token unused past its 30-day lifetime', async () => {
    const session = await login(t.app, await newUser(t.app))
    t.clock.advanceSeconds(30 * DAY + 1)
    const events = recordEvents()
    expectProblem(await refresh(t.app, session.refresh), 401, 'REFRESH_TOKEN_INVALID')
    expect(events).toEqual([])
  })

  it('answers REFRESH_TOKEN_INVALID for the token of a logged-out session', async () => {
    const session = await login(t.app, await newUser(t.app))
    const logout = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout',
      cookies: { refresh_token: session.refresh },
    })
    expect(logout.statusCode).toBe(204)
    const events = recordEvents()
    expectProblem(await refresh(t.app, session.refresh), 401, 'REFRESH_TOKEN_INVALID')
    expect(events).toEqual([])
  })
})

describe('logout', () => {
  it('revokes the session, keeps its row with the revocation time and reason, and clears both cookies', async () => {
    const session = await login(t.app, await newUser(t.app))
    t.clock.advanceSeconds(5)
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout',
      cookies: { refresh_token: session.refresh },
    })
    expect(res.statusCode).toBe(204)
    expect(res.body).toBe('')
    expectCookiesCleared(res)

    const row = await sessionRow(session.sessionId)
    expect(row.revoked_at).toEqual(t.clock.now())
    expect(row.revoked_reason).toBe('logout')
    const tokens = await t.app.db
      .selectFrom('refresh_tokens')
      .select(['revoked_at'])
      .where('session_id', '=', session.sessionId)
      .execute()
    expect(tokens).toEqual([{ revoked_at: t.clock.now() }])
    expectProblem(await refresh(t.app, session.refresh), 401, 'REFRESH_TOKEN_INVALID')
  })

  it('answers 204 and clears the cookies without a refresh cookie', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/auth/logout' })
    expect(res.statusCode).toBe(204)
    expectCookiesCleared(res)
  })

  it('refuses logout-all without an access cookie', async () => {
    expectProblem(
      await t.app.inject({ method: 'POST', url: '/api/auth/logout-all' }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
  })

  it("logout-all revokes every session of the user and no other user's", async () => {
    const email = await newUser(t.app)
    const first = await login(t.app, email)
    const second = await login(t.app, email)
    const bystander = await login(t.app, await newUser(t.app, first.organizationId))
    const events = recordEvents()

    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout-all',
      cookies: { access_token: second.access },
    })
    expect(res.statusCode).toBe(204)
    expectCookiesCleared(res)
    expect(events).toEqual([{ userId: first.userId, reason: 'logout_all' }])

    for (const session of [first, second]) {
      const row = await sessionRow(session.sessionId)
      expect(row.revoked_at).toEqual(t.clock.now())
      expect(row.revoked_reason).toBe('logout_all')
      expectProblem(await refresh(t.app, session.refresh), 401, 'REFRESH_TOKEN_INVALID')
    }
    expect((await sessionRow(bystander.sessionId)).revoked_at).toBeNull()
    expect((await refresh(t.app, bystander.refresh)).statusCode).toBe(200)
  })
})

describe('session management', () => {
  it('refuses to list or revoke sessions without an access cookie', async () => {
    expectProblem(
      await t.app.inject({ method: 'GET', url: '/api/auth/sessions' }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
    expectProblem(
      await t.app.inject({ method: 'DELETE', url: `/api/auth/sessions/${randomUUID()}` }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
  })

  it("lists only the caller's active sessions, exactly one of them current", async () => {
    const email = await newUser(t.app)
    const loggedOut = await login(t.app, email)
    await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout',
      cookies: { refresh_token: loggedOut.refresh },
    })
    const laptop = await login(t.app, email, { userAgent: 'Laptop/1.0' })
    t.clock.advanceSeconds(10)
    const phone = await login(t.app, email, { userAgent: 'Phone/2.0', remoteAddress: '203.0.113.9' })
    const stranger = await login(t.app, await newUser(t.app, laptop.organizationId))

    const res = await listSessions(phone.access)
    expect(res.statusCode).toBe(200)
    const items = res.json() as Record<string, unknown>[]
    expect(items.map((s) => s.sessionId).toSorted()).toEqual([laptop.sessionId, phone.sessionId].toSorted())
    expect(items.map((s) => s.sessionId)).not.toContain(stranger.sessionId)
    expect(items.map((s) => s.sessionId)).not.toContain(loggedOut.sessionId)
    for (const item of items) {
      expect(Object.keys(item).toSorted()).toEqual(
        [
          'sessionId',
          'createdAt',
          'lastUsedAt',
          'expiresAt',
          'userAgent',
          'ipAddress',
          'signInMethod',
          // The admin holding the session while impersonating the user; null otherwise.
          'impersonatorId',
          'current',
        ].toSorted(),
      )
    }
    expect(items.filter((s) => s.current === true)).toHaveLength(1)
    const now = t.clock.now()
    expect(items.find((s) => s.sessionId === phone.sessionId)).toEqual({
      sessionId: phone.sessionId,
      createdAt: now.toISOString(),
      lastUsedAt: now.toISOString(),
      // When the session ends unless refreshed: the refresh token's expiry (30 days), within 90.
      expiresAt: new Date(now.getTime() + 30 * DAY * 1000).toISOString(),
      userAgent: 'Phone/2.0',
      ipAddress: '203.0.113.9',
      signInMethod: 'password',
      impersonatorId: null,
      current: true,
    })
    expect(items.find((s) => s.sessionId === laptop.sessionId)).toMatchObject({
      userAgent: 'Laptop/1.0',
      ipAddress: '127.0.0.1',
      current: false,
    })
  })

  it('shows the times as toISOString shows them, microseconds truncated to milliseconds', async () => {
    const session = await login(t.app, await newUser(t.app))
    await sql`update sessions set created_at = '2020-02-03 04:05:06.123999+00',
      last_used_at = last_used_at + interval '0.000999 seconds' where id = ${session.sessionId}`.execute(
      t.app.db,
    )
    await sql`update refresh_tokens set expires_at = expires_at + interval '0.000999 seconds'
      where session_id = ${session.sessionId}`.execute(t.app.db)
    const row = await sessionRow(session.sessionId)
    const token = await t.app.db
      .selectFrom('refresh_tokens')
      .select('expires_at')
      .where('session_id', '=', session.sessionId)
      .executeTakeFirstOrThrow()

    const [item] = (await listSessions(session.access)).json() as Record<string, unknown>[]
    expect(item).toMatchObject({
      createdAt: '2020-02-03T04:05:06.123Z',
      lastUsedAt: row.last_used_at.toISOString(),
      expiresAt: token.expires_at.toISOString(),
    })
    expect(row.created_at.toISOString()).toBe('2020-02-03T04:05:06.123Z')
  })

  it('stops listing a session once its refresh token has expired unused', async () => {
    const email = await newUser(t.app)
    const idle = await login(t.app, email)
    t.clock.advanceSeconds(29 * DAY)
    const fresh = await login(t.app, email)
    const listed = async (access: string) =>
      ((await listSessions(access)).json() as { sessionId: string }[]).map((s) => s.sessionId)
    expect(await listed(fresh.access)).toContain(idle.sessionId)
    t.clock.advanceSeconds(DAY + 1)
    const renewed = cookieValue(await refresh(t.app, fresh.refresh), 'access_token')
    // The idle session can no longer be refreshed, so it is not active any more.
    expect(await listed(renewed)).toEqual([fresh.sessionId])
    expect((await refresh(t.app, idle.refresh)).json().code).toBe('REFRESH_TOKEN_INVALID')
  })

  it('moves lastUsedAt when the session is refreshed', async () => {
    const session = await login(t.app, await newUser(t.app))
    const createdAt = t.clock.now().toISOString()
    t.clock.advanceSeconds(120)
    const res = await refresh(t.app, session.refresh)
    expect(res.statusCode).toBe(200)
    const [item] = (await listSessions(cookieValue(res, 'access_token'))).json()
    expect(item).toMatchObject({
      sessionId: session.sessionId,
      createdAt,
      lastUsedAt: t.clock.now().toISOString(),
      current: true,
    })
  })

  it("revokes the caller's other session and keeps the current one, without touching the cookies", async () => {
    const email = await newUser(t.app)
    const other = await login(t.app, email)
    const current = await login(t.app, email)

    const res = await t.app.inject({
      method: 'DELETE',
      url: `/api/auth/sessions/${other.sessionId}`,
      cookies: { access_token: current.access },
    })
    expect(res.statusCode).toBe(204)
    expect(res.cookies).toEqual([])
    const list = (await listSessions(current.access)).json()
    expect(list.map((s: { sessionId: string }) => s.sessionId)).toEqual([current.sessionId])
    expect((await sessionRow(other.sessionId)).revoked_reason).toBe('revoked_by_user')
    expectProblem(await refresh(t.app, other.refresh), 401, 'REFRESH_TOKEN_INVALID')
    expect((await refresh(t.app, current.refresh)).statusCode).toBe(200)
  })

  it("answers 404 for another user's session and leaves it active", async () => {
    const caller = await login(t.app, await newUser(t.app))
    const victim = await login(t.app, await newUser(t.app, caller.organizationId))

    const res = await t.app.inject({
      method: 'DELETE',
      url: `/api/auth/sessions/${victim.sessionId}`,
      cookies: { access_token: caller.access },
    })
    expectProblem(res, 404, 'NOT_FOUND')
    expect((await sessionRow(victim.sessionId)).revoked_at).toBeNull()
    expect((await refresh(t.app, victim.refresh)).statusCode).toBe(200)
  })

  it('revokes the current session and clears the cookies', async () => {
    const session = await login(t.app, await newUser(t.app))
    const res = await t.app.inject({
      method: 'DELETE',
      url: `/api/auth/sessions/${session.sessionId}`,
      cookies: { access_token: session.access },
    })
    expect(res.statusCode).toBe(204)
    expectCookiesCleared(res)
    expect((await sessionRow(session.sessionId)).revoked_at).toEqual(t.clock.now())
    expectProblem(await refresh(t.app, session.refresh), 401, 'REFRESH_TOKEN_INVALID')
  })

  it('answers 400 VALIDATION_FAILED for a session id that is not a UUID', async () => {
    const session = await login(t.app, await newUser(t.app))
    const res = await t.app.inject({
      method: 'DELETE',
      url: '/api/auth/sessions/not-a-uuid',
      cookies: { access_token: session.access },
    })
    expectProblem(res, 400, 'VALIDATION_FAILED')
    expect(res.json().errors).toEqual([{ path: 'params.sessionId', message: expect.any(String) }])
  })
})

describe('absolute session lifetime', () => {
  const short = useTestAppBeside(t, {
    config: {
      ...FAST_LOGIN_CONFIG,
      'platform.auth.session.absolute-ttl': '2d',
      'platform.auth.refresh-token.ttl': '1d',
      'platform.auth.rate-limit.refresh-per-minute': '1000',
    },
  })

  it('never extends a session past two days from login, however often it is refreshed', async () => {
    const session = await login(short.app, await newUser(short.app))
    const end = short.clock.now().getTime() + 2 * DAY * 1000
    const remaining = () => Math.floor((end - short.clock.now().getTime()) / 1000)
    let token = session.refresh

    // Refreshing every 20 hours keeps the session alive; the cookie never outlives the session.
    const expectedMaxAge = [DAY, 8 * HOUR]
    for (const maxAge of expectedMaxAge) {
      short.clock.advanceSeconds(20 * HOUR)
      const res = await refresh(short.app, token)
      expect(res.statusCode).toBe(200)
      const next = cookie(res, 'refresh_token')
      expect(next?.maxAge).toBe(maxAge)
      expect(next?.maxAge).toBeLessThanOrEqual(remaining())
      token = next?.value as string
    }

    // An hour before the end a refresh still works, and the cookie lives exactly that hour.
    short.clock.advanceSeconds(7 * HOUR)
    const last = await refresh(short.app, token)
    expect(last.statusCode).toBe(200)
    expect(cookie(last, 'refresh_token')?.maxAge).toBe(HOUR)
    expect(remaining()).toBe(HOUR)

    short.clock.advanceSeconds(HOUR)
    const ended = await refresh(short.app, cookieValue(last, 'refresh_token'))
    expectProblem(ended, 401, 'REFRESH_TOKEN_INVALID')
    expectCookiesCleared(ended)
  })
})

describe('refresh rate limit', () => {
  const limited = useTestAppBeside(t, {
    config: { ...FAST_LOGIN_CONFIG, 'platform.auth.rate-limit.refresh-per-minute': '2' },
  })

  it('answers the third refresh from one IP within a minute with 429 RATE_LIMITED and Retry-After', async () => {
    const ip = '198.51.100.23'
    const session = await login(limited.app, await newUser(limited.app), { remoteAddress: ip })
    const second = cookieValue(await refresh(limited.app, session.refresh, ip), 'refresh_token')
    const third = cookieValue(await refresh(limited.app, second, ip), 'refresh_token')

    const res = await refresh(limited.app, third, ip)
    expectProblem(res, 429, 'RATE_LIMITED')
    const retryAfter = Number(res.headers['retry-after'])
    expect(retryAfter).toBeGreaterThanOrEqual(1)
    expect(retryAfter).toBeLessThanOrEqual(60)

    // Another IP is not limited, and the limited call consumed nothing: the token still rotates.
    expect((await refresh(limited.app, 'unknown-token', '198.51.100.24')).statusCode).toBe(401)
    limited.clock.advanceSeconds(retryAfter)
    expect((await refresh(limited.app, third, ip)).statusCode).toBe(200)
  })

  it('counts refreshes that fail (no cookie, an unknown token) and then rotates nothing', async () => {
    const ip = '198.51.100.25'
    const session = await login(limited.app, await newUser(limited.app), { remoteAddress: ip })
    expectProblem(await refresh(limited.app, undefined, ip), 401, 'REFRESH_TOKEN_INVALID')
    expectProblem(await refresh(limited.app, 'unknown-token', ip), 401, 'REFRESH_TOKEN_INVALID')

    const res = await refresh(limited.app, session.refresh, ip)
    expectProblem(res, 429, 'RATE_LIMITED')
    expect(cookie(res, 'refresh_token')).toBeUndefined()
    expectProblem(await refresh(limited.app, undefined, ip), 429, 'RATE_LIMITED')

    limited.clock.advanceSeconds(Number(res.headers['retry-after']))
    expect((await refresh(limited.app, session.refresh, ip)).statusCode).toBe(200)
  })

  it('answers 429 before reuse detection: a rotated token over the limit revokes nothing', async () => {
    const ip = '198.51.100.26'
    const session = await login(limited.app, await newUser(limited.app), { remoteAddress: ip })
    const second = cookieValue(await refresh(limited.app, session.refresh, ip), 'refresh_token')
    expectProblem(await refresh(limited.app, 'unknown-token', ip), 401, 'REFRESH_TOKEN_INVALID')

    const reused = await refresh(limited.app, session.refresh, ip)
    expectProblem(reused, 429, 'RATE_LIMITED')
    limited.clock.advanceSeconds(Number(reused.headers['retry-after']))
    expect((await refresh(limited.app, second, ip)).statusCode).toBe(200)
  })
})
