import type { FastifyInstance, InjectOptions } from 'fastify'
import { Secret, TOTP } from 'otpauth'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type Actor,
  expectProblem,
  FAST_LOGIN_CONFIG,
  newActor,
  newOrganization,
  newUser,
  refresh,
  type Session,
  sessionOf,
  signIn,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp, useTestApp } from './helpers/app.ts'
import { newApiKey, protectedTestRoutes, type TestApiKey } from './helpers/machines.ts'
import { pollUntil } from './helpers/poll.ts'

// An organization's security policies (`security.*` configuration keys), from outside: each value
// checked when written, each policy enforced on the next request, and lifted again when removed.
// The allowlist is judged on the client address as `platform.server.trust-proxy` decides it: off
// here, on in a second instance on the same database.

const t = useTestApp({ config: FAST_LOGIN_CONFIG, configure: protectedTestRoutes() })

let organizationId: string
let admin: Actor

beforeAll(async () => {
  organizationId = await newOrganization(t.app)
  admin = await newActor(t.app, { organizationId, role: 'admin' })
})

const OFFICE = '10.1.2.3'

const as = (app: FastifyInstance, session: Session | null, options: InjectOptions, ip?: string) =>
  app.inject({
    ...options,
    ...(session ? { cookies: { access_token: session.access } } : {}),
    ...(ip ? { remoteAddress: ip } : {}),
  })
const put = (key: string, value: string, options: { ip?: string; confirm?: boolean } = {}) =>
  as(
    t.app,
    admin.session,
    {
      method: 'PUT',
      url: `/api/organizations/${organizationId}/config/${key}${options.confirm ? '?confirm=true' : ''}`,
      payload: { value },
    },
    options.ip,
  )
const remove = (key: string, ip?: string) =>
  as(
    t.app,
    admin.session,
    { method: 'DELETE', url: `/api/organizations/${organizationId}/config/${key}` },
    ip,
  )
const sessions = (session: Session, ip?: string, app = t.app) =>
  as(app, session, { method: 'GET', url: '/api/auth/sessions' }, ip)
const scoped = (key: TestApiKey, ip?: string, app = t.app) =>
  app.inject({
    method: 'GET',
    url: '/api/test/scoped',
    headers: key.headers,
    ...(ip ? { remoteAddress: ip } : {}),
  })

describe('writing a policy', () => {
  it('refuses a bad value of each key, and an unknown security key, with 400', async () => {
    const bad: [string, string][] = [
      ['security.mfa-required', 'yes'],
      ['security.mfa-grace', 'soon'],
      ['security.session-max-age', '-1h'],
      ['security.ip-allowlist', '10.0.0.0/33'],
      ['security.ip-allowlist', '10.0.0.0/8,,'],
      ['security.ip-allowlist', 'office'],
      ['security.ip-allowlist', '2001:db8::/129'],
      ['security.sso-required', 'maybe'],
      ['security.no-such-policy', 'true'],
    ]
    for (const [key, value] of bad) {
      const res = await put(key, value)
      expect({ key, value, status: res.statusCode, code: res.json().code }).toEqual({
        key,
        value,
        status: 400,
        code: 'VALIDATION_FAILED',
      })
    }
    // Nothing was stored, and keys outside `security.` stay free-form.
    expect((await put('theme', 'anything at all')).statusCode).toBe(200)
    const listed = await as(t.app, admin.session, {
      method: 'GET',
      url: `/api/organizations/${organizationId}/config`,
    })
    expect((listed.json().items as { key: string }[]).map((entry) => entry.key)).toEqual(['theme'])
  })

  it('is audited', async () => {
    expect((await put('security.session-max-age', '8h')).statusCode).toBe(200)
    const event = await t.app.db
      .selectFrom('audit_events')
      .select(['actor_id', 'data'])
      .where('organization_id', '=', organizationId)
      .where('type', '=', 'organization_config.changed')
      .orderBy('sequence', 'desc')
      .executeTakeFirstOrThrow()
    expect(event).toEqual({
      actor_id: admin.user.id,
      data: { key: 'security.session-max-age', change: 'set' },
    })
    expect((await remove('security.session-max-age')).statusCode).toBe(204)
  })
})

describe('security.ip-allowlist', () => {
  let member: Session
  let key: TestApiKey
  let proxied: TestApp

  beforeAll(async () => {
    member = await signIn(t.app, await newUser(t.app, { organizationId }))
    key = await newApiKey(t.app, organizationId, ['files:read'])
    proxied = await createTestApp({
      database: t.database,
      clock: t.clock,
      config: {
        ...FAST_LOGIN_CONFIG,
        'platform.auth.jwt.secret': t.config.auth.jwt.secret,
        'platform.server.trust-proxy': '127.0.0.1',
      },
      configure: protectedTestRoutes(),
    })
  })
  afterAll(async () => {
    await proxied?.close()
  })

  it("refuses a list without the writer's own address unless confirmed", async () => {
    expectProblem(await put('security.ip-allowlist', '10.0.0.0/8, 2001:db8::/32'), 409, 'IP_NOT_ALLOWED')
    expect((await sessions(member)).statusCode).toBe(200)
    expect((await put('security.ip-allowlist', '10.0.0.0/8, 2001:db8::/32', { ip: OFFICE })).statusCode).toBe(
      200,
    )
  })

  it("refuses the organization's users and API keys from elsewhere, on the next request", async () => {
    expectProblem(await sessions(member), 403, 'IP_NOT_ALLOWED')
    expectProblem(await sessions(admin.session), 403, 'IP_NOT_ALLOWED')
    expectProblem(await scoped(key), 403, 'IP_NOT_ALLOWED')
    expect((await sessions(member, OFFICE)).statusCode).toBe(200)
    expect((await sessions(member, '2001:db8::5')).statusCode).toBe(200)
    expect((await sessions(member, '::ffff:10.9.9.9')).statusCode).toBe(200)
    expect((await scoped(key, OFFICE)).statusCode).toBe(200)
    // Another organization is not concerned.
    const stranger = await signIn(t.app, await newUser(t.app))
    expect((await sessions(stranger)).statusCode).toBe(200)
  })

  it("refuses its members' sign-ins and refreshes from elsewhere, and ends a session refreshed there", async () => {
    const user = await newUser(t.app, { organizationId })
    const loginFrom = (ip?: string, password = user.password) =>
      t.app.inject({
        method: 'POST',
        url: '/api/auth/login',
        payload: { username: user.email, password },
        ...(ip ? { remoteAddress: ip } : {}),
      })
    const refreshFrom = (session: Session, ip?: string) =>
      t.app.inject({
        method: 'POST',
        url: '/api/auth/refresh',
        cookies: { refresh_token: session.refresh },
        ...(ip ? { remoteAddress: ip } : {}),
      })
    const cookie = (res: Awaited<ReturnType<typeof loginFrom>>, name: string) =>
      res.cookies.find((c) => c.name === name)

    // The credentials are proved first: a wrong password from elsewhere is refused as anywhere.
    expectProblem(await loginFrom(undefined, `${user.password}-wrong`), 401, 'INVALID_CREDENTIALS')
    const refused = await loginFrom()
    expectProblem(refused, 403, 'IP_NOT_ALLOWED')
    expect(cookie(refused, 'refresh_token')).toBeUndefined()
    expect(cookie(refused, 'access_token')).toBeUndefined()

    const session = sessionOf(await loginFrom(OFFICE))
    const kept = sessionOf(await refreshFrom(session, OFFICE))
    const away = await refreshFrom(kept)
    expectProblem(away, 403, 'IP_NOT_ALLOWED')
    expect(cookie(away, 'refresh_token')?.value).toBe('')
    // The session is over, back at the office too.
    expect((await refreshFrom(kept, OFFICE)).statusCode).toBe(401)
    const again = sessionOf(await loginFrom(OFFICE))
    const listed = (await sessions(again, OFFICE)).json() as { sessionId: string }[]
    expect(listed.map((item) => item.sessionId)).not.toContain(kept.sessionId)

    // Both refusals are in the organization's audit trail, told apart from a wrong password.
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'actor_type', 'subject_type', 'subject_id', 'data'])
      .where('organization_id', '=', organizationId)
      .where((eb) => eb.or([eb('subject_id', '=', user.id), eb('subject_id', '=', kept.sessionId)]))
      .where('type', 'in', ['sign_in.failed', 'session.revoked'])
      .orderBy('position')
      .execute()
    expect(events).toEqual([
      {
        type: 'sign_in.failed',
        actor_type: 'system',
        subject_type: 'user',
        subject_id: user.id,
        data: { reason: 'password' },
      },
      {
        type: 'sign_in.failed',
        actor_type: 'system',
        subject_type: 'user',
        subject_id: user.id,
        data: { method: 'password', reason: 'IP_NOT_ALLOWED' },
      },
      {
        type: 'session.revoked',
        actor_type: 'system',
        subject_type: 'session',
        subject_id: kept.sessionId,
        data: { reason: 'ip_not_allowed' },
      },
    ])
  })

  it('judges the address trust-proxy decides: a forwarded address only from a trusted proxy', async () => {
    const forwarded = { 'x-forwarded-for': OFFICE }
    // trust-proxy off: the header is the client's word, the connection's address counts.
    const direct = await t.app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: member.access },
      headers: forwarded,
    })
    expectProblem(direct, 403, 'IP_NOT_ALLOWED')
    // trust-proxy 127.0.0.1: the proxy's forwarded address counts, for users and API keys.
    const viaProxy = await proxied.app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: member.access },
      headers: forwarded,
    })
    expect(viaProxy.statusCode).toBe(200)
    const keyViaProxy = await proxied.app.inject({
      method: 'GET',
      url: '/api/test/scoped',
      headers: { ...key.headers, ...forwarded },
    })
    expect(keyViaProxy.statusCode).toBe(200)
    const notForwarded = await proxied.app.inject({
      method: 'GET',
      url: '/api/test/scoped',
      headers: key.headers,
    })
    expectProblem(notForwarded, 403, 'IP_NOT_ALLOWED')
  })

  it('lifts the restriction once removed, on every instance', async () => {
    expect((await remove('security.ip-allowlist', OFFICE)).statusCode).toBe(204)
    expect((await sessions(member)).statusCode).toBe(200)
    expect((await scoped(key)).statusCode).toBe(200)
    // The other instance hears of the change through the pushed notification.
    await pollUntil(
      'the other instance lifting the allowlist',
      async () => (await scoped(key, undefined, proxied.app)).statusCode === 200,
      20_000,
    )
  })
})

/** The session with a new access token (the test clock outran the old one). */
const renew = async (session: Session) => sessionOf(await refresh(t.app, session))

const codeOf = (secret: string) =>
  new TOTP({ secret: Secret.fromBase32(secret), digits: 6, period: 30 }).generate({
    timestamp: t.clock.now().getTime(),
  })

/** Turns TOTP on for the session's account; returns its secret. */
async function enrol(session: Session): Promise<string> {
  const setup = await as(t.app, session, { method: 'POST', url: '/api/auth/otp/setup' })
  expect(setup.statusCode).toBe(200)
  const secret = setup.json().secret as string
  const enabled = await as(t.app, session, {
    method: 'POST',
    url: '/api/auth/otp/enable',
    payload: { code: codeOf(secret) },
  })
  expect(enabled.statusCode).toBe(200)
  return secret
}

let adminSecret = ''

describe('security.mfa-required', () => {
  it('refuses members without a second factor after the grace, except enrolment and sign-out', async () => {
    adminSecret = await enrol(admin.session)
    let session = await signIn(t.app, await newUser(t.app, { organizationId }))
    expect((await put('security.mfa-grace', '1h')).statusCode).toBe(200)
    expect((await put('security.mfa-required', 'true')).statusCode).toBe(200)
    // Within the grace: allowed.
    expect((await sessions(session)).statusCode).toBe(200)
    t.clock.advance(60 * 60_000 + 1000)
    session = await renew(session)
    admin.session = await renew(admin.session)
    expectProblem(await sessions(session), 403, 'MFA_ENROLLMENT_REQUIRED')
    expect((await as(t.app, session, { method: 'GET', url: '/api/auth/me' })).statusCode).toBe(200)
    await enrol(session)
    // Enrolled: everything again; so is the admin, who has a factor.
    expect((await sessions(session)).statusCode).toBe(200)
    expect((await sessions(admin.session)).statusCode).toBe(200)
    // API keys have no second factor to enrol: the policy is about members.
    const key = await newApiKey(t.app, organizationId, ['files:read'])
    expect((await scoped(key)).statusCode).toBe(200)

    const other = await signIn(t.app, await newUser(t.app, { organizationId }))
    expectProblem(await sessions(other), 403, 'MFA_ENROLLMENT_REQUIRED')
    expect((await as(t.app, other, { method: 'POST', url: '/api/auth/logout-all' })).statusCode).toBe(204)

    const late = await signIn(t.app, await newUser(t.app, { organizationId }))
    expectProblem(await sessions(late), 403, 'MFA_ENROLLMENT_REQUIRED')
    expect((await put('security.mfa-required', 'false')).statusCode).toBe(200)
    expect((await sessions(late)).statusCode).toBe(200)
  })
})

describe('security.session-max-age', () => {
  it('refuses a refresh longer than that after the sign-in, and not once removed', async () => {
    const user = await newUser(t.app, { organizationId })
    const session = await signIn(t.app, user)
    admin.session = await renew(admin.session)
    expect((await put('security.session-max-age', '1h')).statusCode).toBe(200)
    t.clock.advance(30 * 60_000)
    const refreshed = sessionOf(await refresh(t.app, session))
    t.clock.advance(31 * 60_000)
    expectProblem(await refresh(t.app, refreshed), 401, 'REFRESH_TOKEN_INVALID')
    // The session was ended: it is not in the user's list any more.
    const fresh = await signIn(t.app, user)
    const listed = (await sessions(fresh)).json() as { sessionId: string }[]
    expect(listed.map((item) => item.sessionId)).not.toContain(session.sessionId)

    // The admin's own session is older than the policy allows too: the admin signs in again.
    expectProblem(await refresh(t.app, admin.session), 401, 'REFRESH_TOKEN_INVALID')
    t.clock.advance(30_000)
    admin.session = await signIn(t.app, admin.user, { otpCode: codeOf(adminSecret) })
    expect((await remove('security.session-max-age')).statusCode).toBe(204)
    t.clock.advance(2 * 60 * 60_000)
    expect((await refresh(t.app, fresh)).statusCode).toBe(200)
  })
})
