import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { describe, expect, it, onTestFinished } from 'vitest'
import type { PlatformEvents } from '../src/events.ts'
import { cookie, FAST_LOGIN_CONFIG, newUser, PASSWORD } from './helpers/accounts.ts'
import { createTestApp, useTestApp } from './helpers/app.ts'

// The refresh reuse grace (platform.auth.refresh.reuse-grace): a rotated refresh token presented
// again within the grace, while its successor is unused, gets a new successor; anything else stays
// reuse (src/features/sessions/repository.ts rotateWithinGrace). The strict default is covered,
// unchanged, by test/auth.refresh-reuse.test.ts and test/auth.refresh-concurrency.test.ts.

const GRACE = 30

const t = useTestApp({
  config: {
    ...FAST_LOGIN_CONFIG,
    'platform.auth.rate-limit.refresh-per-minute': '1000',
    'platform.auth.refresh.reuse-grace': `${GRACE}s`,
  },
})

type RevokedEvent = PlatformEvents['UserSessionsRevokedEvent']

interface Signed {
  userId: string
  sessionId: string
  refresh: string
}

async function signIn(app: FastifyInstance): Promise<Signed> {
  const user = await newUser(app)
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: { username: user.email, password: PASSWORD },
  })
  expect(res.statusCode).toBe(200)
  return { ...res.json(), refresh: cookie(res, 'refresh_token')?.value as string }
}

const refresh = (app: FastifyInstance, token: string) =>
  app.inject({ method: 'POST', url: '/api/auth/refresh', cookies: { refresh_token: token } })

function rotated(res: LightMyRequestResponse): string {
  expect(res.statusCode, res.body).toBe(200)
  const next = cookie(res, 'refresh_token')?.value
  expect(next).toBeTruthy()
  return next as string
}

function expectReuse(res: LightMyRequestResponse): void {
  expect(res.statusCode).toBe(401)
  expect(res.json().code).toBe('REFRESH_TOKEN_REUSED')
}

/** The session's tokens that can still be rotated (never more than one). */
async function liveTokens(app: FastifyInstance, sessionId: string) {
  return app.db
    .selectFrom('refresh_tokens')
    .select(['id', 'parent_id'])
    .where('session_id', '=', sessionId)
    .where('rotated_at', 'is', null)
    .where('revoked_at', 'is', null)
    .execute()
}

const sessionRevoked = async (app: FastifyInstance, sessionId: string) =>
  (
    await app.db
      .selectFrom('sessions')
      .select('revoked_at')
      .where('id', '=', sessionId)
      .executeTakeFirstOrThrow()
  ).revoked_at !== null

function recordEvents(app: FastifyInstance): RevokedEvent[] {
  const seen: RevokedEvent[] = []
  onTestFinished(app.services.events.on('UserSessionsRevokedEvent', (event) => void seen.push(event)))
  return seen
}

describe('refresh reuse grace', () => {
  it('lets five parallel refreshes with one cookie all succeed, leaving exactly one live token', async () => {
    const session = await signIn(t.app)
    const events = recordEvents(t.app)
    const answers = await Promise.all(Array.from({ length: 5 }, () => refresh(t.app, session.refresh)))
    const successors = answers.map(rotated)
    expect(new Set(successors).size).toBe(5)
    expect(await liveTokens(t.app, session.sessionId)).toHaveLength(1)
    expect(events).toEqual([])

    // Whichever answer the browser kept, it refreshes on: an unused sibling within the grace too.
    const kept = successors[2] as string
    const after = rotated(await refresh(t.app, kept))
    expect(await liveTokens(t.app, session.sessionId)).toHaveLength(1)
    // And the chain goes on from there, strictly once its newest token was used.
    const next = rotated(await refresh(t.app, after))
    expectReuse(await refresh(t.app, kept))
    expect(await sessionRevoked(t.app, session.sessionId)).toBe(true)
    expect((await refresh(t.app, next)).statusCode).toBe(401)
  })

  it('answers a retry with the old cookie after a lost answer, and keeps the session', async () => {
    const session = await signIn(t.app)
    const lost = rotated(await refresh(t.app, session.refresh))
    t.clock.advanceSeconds(GRACE - 1)
    const retried = rotated(await refresh(t.app, session.refresh))
    expect(retried).not.toBe(lost)
    expect(await sessionRevoked(t.app, session.sessionId)).toBe(false)
    // The retry's successor is the live one; the lost one was retired unused.
    const [live] = await liveTokens(t.app, session.sessionId)
    expect(live).toBeDefined()
    rotated(await refresh(t.app, retried))
  })

  it('treats the parent presented after its successor was used as reuse: session revoked, event published', async () => {
    const session = await signIn(t.app)
    const events = recordEvents(t.app)
    const successor = rotated(await refresh(t.app, session.refresh))
    const newest = rotated(await refresh(t.app, successor))

    expectReuse(await refresh(t.app, session.refresh))
    expect(await sessionRevoked(t.app, session.sessionId)).toBe(true)
    expect(events).toEqual([{ userId: session.userId, reason: 'refresh_token_reuse_detected' }])
    expect((await refresh(t.app, newest)).statusCode).toBe(401)
  })

  it('never accepts a grandparent, even within the grace', async () => {
    const session = await signIn(t.app)
    const child = rotated(await refresh(t.app, session.refresh))
    rotated(await refresh(t.app, child))
    // The grandchild is unused, but the login token is its grandparent.
    expectReuse(await refresh(t.app, session.refresh))
    expect(await sessionRevoked(t.app, session.sessionId)).toBe(true)
  })

  it('treats the parent presented after the grace as reuse, even while its successor is unused', async () => {
    const session = await signIn(t.app)
    const events = recordEvents(t.app)
    const successor = rotated(await refresh(t.app, session.refresh))
    t.clock.advanceSeconds(GRACE + 1)
    expectReuse(await refresh(t.app, session.refresh))
    expect(await sessionRevoked(t.app, session.sessionId)).toBe(true)
    expect(events).toHaveLength(1)
    expect((await refresh(t.app, successor)).statusCode).toBe(401)
  })

  it('measures the grace from the first rotation: repeated presentations do not extend it', async () => {
    const session = await signIn(t.app)
    rotated(await refresh(t.app, session.refresh))
    t.clock.advanceSeconds(GRACE - 5)
    rotated(await refresh(t.app, session.refresh))
    t.clock.advanceSeconds(10)
    expectReuse(await refresh(t.app, session.refresh))
  })

  it('gives a revoked session nothing: its rotated token within the grace is refused', async () => {
    const session = await signIn(t.app)
    rotated(await refresh(t.app, session.refresh))
    const logout = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout',
      cookies: { refresh_token: session.refresh },
    })
    expect(logout.statusCode).toBe(204)
    const res = await refresh(t.app, session.refresh)
    expect(res.statusCode).toBe(401)
    expect(await liveTokens(t.app, session.sessionId)).toHaveLength(0)
  })

  it('decides between instances by the row lock: parallel retries on two instances leave one live token', async () => {
    const second = await createTestApp({
      database: t.database,
      clock: t.clock,
      config: {
        ...FAST_LOGIN_CONFIG,
        'platform.auth.rate-limit.refresh-per-minute': '1000',
        'platform.auth.refresh.reuse-grace': `${GRACE}s`,
      },
    })
    onTestFinished(() => second.close())
    const session = await signIn(t.app)
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => refresh(i % 2 === 0 ? t.app : second.app, session.refresh)),
    )
    for (const answer of answers) rotated(answer)
    expect(await liveTokens(t.app, session.sessionId)).toHaveLength(1)
  })
})

describe('refresh reuse grace over HTTP', () => {
  it('succeeds when the client retries with the old cookie after aborting a refresh the server committed', async () => {
    // Holds the answer of the next refresh until the client has given up on it.
    let hold: { reached: () => void; release: Promise<void> } | undefined
    const server = await createTestApp({
      database: t.database,
      config: {
        ...FAST_LOGIN_CONFIG,
        'platform.auth.rate-limit.refresh-per-minute': '1000',
        'platform.auth.refresh.reuse-grace': `${GRACE}s`,
      },
      configure: (app) => {
        app.addHook('onSend', async (request) => {
          const held = hold
          if (request.routeOptions.url !== '/api/auth/refresh' || !held) return
          hold = undefined
          held.reached()
          await held.release
        })
      },
    })
    onTestFinished(() => server.close())
    const base = await server.app.listen({ host: '127.0.0.1', port: 0 })
    const session = await signIn(server.app)
    const post = (token: string, signal?: AbortSignal) =>
      fetch(`${base}/api/auth/refresh`, {
        method: 'POST',
        headers: { cookie: `refresh_token=${token}` },
        ...(signal ? { signal } : {}),
      })

    const reached = Promise.withResolvers<void>()
    const release = Promise.withResolvers<void>()
    hold = { reached: reached.resolve, release: release.promise }
    const aborter = new AbortController()
    const lost = post(session.refresh, aborter.signal)
    // The handler has run and its rotation committed: only the answer is still on its way.
    await reached.promise
    const rotatedRow = await server.app.db
      .selectFrom('refresh_tokens')
      .select('rotated_at')
      .where('session_id', '=', session.sessionId)
      .where('parent_id', 'is', null)
      .executeTakeFirstOrThrow()
    expect(rotatedRow.rotated_at).not.toBeNull()
    aborter.abort()
    await expect(lost).rejects.toThrow()
    release.resolve()

    const retry = await post(session.refresh)
    expect(retry.status).toBe(200)
    expect(
      retry.headers
        .getSetCookie()
        .some((c) => c.startsWith('refresh_token=') && !c.startsWith('refresh_token=;')),
    ).toBe(true)
    expect(await sessionRevoked(server.app, session.sessionId)).toBe(false)
    expect(await liveTokens(server.app, session.sessionId)).toHaveLength(1)
  })
})

describe('refresh reuse grace: configuration', () => {
  it('refuses a grace longer than 5 minutes at start-up, naming the property', async () => {
    await expect(
      createTestApp({ database: t.database, config: { 'platform.auth.refresh.reuse-grace': '6m' } }),
    ).rejects.toThrow(/platform\.auth\.refresh\.reuse-grace/)
  })
})
