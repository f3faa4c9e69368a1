import type { LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import type { PlatformEvents } from '../src/events.ts'
import { cookie, FAST_LOGIN_CONFIG, newUser, type Session, signIn } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Strict rotation under load and under failure: of many simultaneous refreshes with
// one token exactly one wins, and a database error inside the rotation is a retryable 503, not reuse.
// On PostgreSQL (TEST_DATABASE_URL) the requests really run on parallel connections.

const PARALLEL = 24

const t = useTestApp({
  config: { ...FAST_LOGIN_CONFIG, 'platform.auth.rate-limit.refresh-per-minute': '1000' },
})

/** A member of a new organization, signed in. */
async function login(): Promise<Session> {
  const session = await signIn(t.app, await newUser(t.app))
  expect(session.refresh).toBeTruthy()
  return session
}

const refresh = (token: string) =>
  t.app.inject({ method: 'POST', url: '/api/auth/refresh', cookies: { refresh_token: token } })

/** Refresh tokens of the session that could still be rotated. */
const activeTokens = (sessionId: string) =>
  t.app.db
    .selectFrom('refresh_tokens')
    .select(['id', 'token_hash', 'rotated_at'])
    .where('session_id', '=', sessionId)
    .where('rotated_at', 'is', null)
    .where('revoked_at', 'is', null)
    .execute()

function recordEvents(): PlatformEvents['UserSessionsRevokedEvent'][] {
  const seen: PlatformEvents['UserSessionsRevokedEvent'][] = []
  onTestFinished(t.app.services.events.on('UserSessionsRevokedEvent', (event) => void seen.push(event)))
  return seen
}

describe('concurrent refreshes with one token', () => {
  it(`lets exactly one of ${PARALLEL} simultaneous refreshes win and treats the others as reuse`, async () => {
    const session = await login()
    const events = recordEvents()

    const responses = await Promise.all(Array.from({ length: PARALLEL }, () => refresh(session.refresh)))

    const outcomes = responses.map((res) =>
      res.statusCode === 200 ? 'OK' : `${res.statusCode} ${res.json().code}`,
    )
    expect(outcomes.filter((outcome) => outcome === 'OK')).toHaveLength(1)
    expect(outcomes.filter((outcome) => outcome !== 'OK')).toEqual(
      Array(PARALLEL - 1).fill('401 REFRESH_TOKEN_REUSED'),
    )
    const winner = responses.find((res) => res.statusCode === 200) as LightMyRequestResponse
    expect(winner.json()).toMatchObject({ userId: session.userId, sessionId: session.sessionId })

    // Strict reuse: the losers revoked the session, so not even the winner's new token survives.
    expect(await activeTokens(session.sessionId)).toHaveLength(0)
    const row = await t.app.db
      .selectFrom('sessions')
      .select(['revoked_at', 'revoked_reason'])
      .where('id', '=', session.sessionId)
      .executeTakeFirstOrThrow()
    expect(row.revoked_reason).toBe('refresh_token_reuse_detected')
    // One incident, one event: only the loser that actually revoked the session publishes.
    expect(events).toEqual([{ userId: session.userId, reason: 'refresh_token_reuse_detected' }])
    const newest = cookie(winner, 'refresh_token')?.value as string
    expect((await refresh(newest)).json().code).toBe('REFRESH_TOKEN_INVALID')
  })
})

describe('a database failure inside the rotation', () => {
  // A trigger makes the insert of the new token fail, after the old token was claimed in the same
  // transaction, while a row named 'refresh_tokens.insert' exists in test_faults.
  beforeAll(async () => {
    await sql`create table test_faults (name text primary key)`.execute(t.app.db)
    await sql`
      create function test_fail_refresh_token_insert() returns trigger language plpgsql as $$
      begin
        if exists (select 1 from test_faults where name = 'refresh_tokens.insert') then
          raise exception 'injected fault: refresh_tokens insert';
        end if;
        return new;
      end
      $$`.execute(t.app.db)
    await sql`
      create trigger test_fail_refresh_token_insert before insert on refresh_tokens
      for each row execute function test_fail_refresh_token_insert()`.execute(t.app.db)
  })
  afterAll(async () => {
    await sql`drop trigger if exists test_fail_refresh_token_insert on refresh_tokens`.execute(t.app.db)
  })

  const injectFault = () =>
    sql`insert into test_faults (name) values ('refresh_tokens.insert')`.execute(t.app.db)
  const clearFault = () => sql`delete from test_faults`.execute(t.app.db)

  it('answers 503 SERVICE_UNAVAILABLE, not reuse, and leaves the same token usable', async () => {
    const session = await login()
    const [before] = await activeTokens(session.sessionId)
    const events = recordEvents()
    await injectFault()
    onTestFinished(async () => {
      await clearFault()
    })

    const failed = await refresh(session.refresh)
    expect(failed.statusCode).toBe(503)
    expect(failed.json().code).toBe('SERVICE_UNAVAILABLE')
    expect(failed.headers['retry-after']).toBeDefined()
    expect(failed.body).not.toContain('injected fault')
    expect(failed.cookies).toEqual([])
    expect(events).toEqual([])
    // The claim was rolled back with the failed insert: the token is still the session's active one.
    expect(await activeTokens(session.sessionId)).toEqual([before])

    await clearFault()
    const retried = await refresh(session.refresh)
    expect(retried.statusCode).toBe(200)
    expect(retried.json()).toMatchObject({ userId: session.userId, sessionId: session.sessionId })
    expect(cookie(retried, 'refresh_token')?.value).not.toBe(session.refresh)
    expect(events).toEqual([])
    const [after] = await activeTokens(session.sessionId)
    expect(after?.id).not.toBe(before?.id)
  })

  it('keeps failing with 503, never 401, for as long as the fault lasts', async () => {
    const session = await login()
    await injectFault()
    onTestFinished(async () => {
      await clearFault()
    })
    for (let attempt = 0; attempt < 3; attempt++) {
      const res = await refresh(session.refresh)
      expect(res.statusCode).toBe(503)
      expect(res.json().code).toBe('SERVICE_UNAVAILABLE')
    }
    await clearFault()
    expect((await refresh(session.refresh)).statusCode).toBe(200)
  })
})
