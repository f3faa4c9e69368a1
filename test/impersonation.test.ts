import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { Secret, TOTP } from 'otpauth'
import { beforeAll, describe, expect, it } from 'vitest'
import { openPostgres } from '../src/db/database.ts'
import {
  asUser,
  deliverMail,
  expectProblem,
  mailsTo,
  newOrganization,
  newUser,
  refresh,
  type Session,
  sessionOf,
  signIn,
  type TestUser,
  useMailTestApp,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { pollUntil } from './helpers/poll.ts'

// An organization admin acting as a member: who may start it and when, what the impersonation
// session's tokens say (`act`), what it may not do, what the audit trail and the member's mail say,
// and that stopping ends it at once, on another instance too. Session versions are off and the
// revocation fallback is an hour, so only the impersonation gate and the pushed revocation can
// explain a refusal within a test.

const CONFIG = { 'platform.auth.revocation.fallback-ttl': '1h' }
const t = useMailTestApp({ config: CONFIG })

let organizationId: string
let admin: TestUser
let member: TestUser

beforeAll(async () => {
  organizationId = await newOrganization(t.app)
  admin = await newUser(t.app, { organizationId, role: 'admin' })
  member = await newUser(t.app, { organizationId })
})

const REASON = 'Ticket 4711: the report page shows nothing'

const start = (session: Session | null, targetId: string, body: object = { reason: REASON }) =>
  asUser(t.app, session, { method: 'POST', url: `/api/users/${targetId}/impersonation`, payload: body })
const stop = (app: FastifyInstance, session: Session) =>
  asUser(app, session, { method: 'DELETE', url: '/api/impersonation' })
const me = (app: FastifyInstance, session: Session) =>
  asUser(app, session, { method: 'GET', url: '/api/auth/me' })

const claimsOf = (access: string) =>
  JSON.parse(Buffer.from(access.split('.')[1] ?? '', 'base64url').toString('utf8')) as Record<string, unknown>

/** The admin, freshly signed in, impersonating the member. */
async function impersonating(target: TestUser = member): Promise<{ own: Session; as: Session }> {
  const own = await signIn(t.app, admin)
  const res = await start(own, target.id)
  return { own, as: sessionOf(res) }
}

const events = (type: string) =>
  t.app.db
    .selectFrom('audit_events')
    .select(['actor_type', 'actor_id', 'subject_type', 'subject_id', 'data'])
    .where('organization_id', '=', organizationId)
    .where('type', '=', type)
    .orderBy('sequence')
    .execute()

describe('starting an impersonation', () => {
  it("gives the admin a session of the member's whose tokens name the admin in act", async () => {
    const { own, as } = await impersonating()
    expect(as.userId).toBe(member.id)
    expect(as.sessionId).not.toBe(own.sessionId)
    expect(claimsOf(as.access)).toMatchObject({ sub: member.id, act: { sub: admin.id } })
    expect(claimsOf(own.access).act).toBeUndefined()

    const principal = await me(t.app, as)
    expect(principal.statusCode).toBe(200)
    expect(principal.json()).toMatchObject({
      userId: member.id,
      impersonatorId: admin.id,
      sessionId: as.sessionId,
    })
    expect((await me(t.app, own)).json().impersonatorId).toBeNull()

    // The member's session list shows the impersonation, and who holds it.
    const memberOwn = await signIn(t.app, member)
    const list = await asUser(t.app, memberOwn, { method: 'GET', url: '/api/auth/sessions' })
    const items = list.json() as { sessionId: string; impersonatorId: string | null; signInMethod: string }[]
    expect(items.find((item) => item.sessionId === as.sessionId)).toMatchObject({
      impersonatorId: admin.id,
      signInMethod: 'impersonation',
    })
    expect(items.find((item) => item.sessionId === memberOwn.sessionId)?.impersonatorId).toBeNull()
    // A refreshed token still names the admin.
    const refreshed = sessionOf(await refresh(t.app, as))
    expect(claimsOf(refreshed.access)).toMatchObject({ sub: member.id, act: { sub: admin.id } })
  })

  it('mails the member the admin and the reason, and records the start as the admin’s', async () => {
    await deliverMail(t)
    t.smtp.clear()
    const { as } = await impersonating()
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, member.email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.subject).toBe('An administrator is viewing your account')
    expect(mails[0]?.text).toContain(admin.email)
    expect(mails[0]?.text).toContain(REASON)
    const started = (await events('impersonation.started')).at(-1)
    expect(started).toMatchObject({
      actor_type: 'user',
      actor_id: admin.id,
      subject_type: 'user',
      subject_id: member.id,
      data: { reason: REASON, sessionId: as.sessionId },
    })
  })

  it('refuses oneself, another admin, an inactive member, a member caller and another organization', async () => {
    const own = await signIn(t.app, admin)
    expectProblem(await start(own, admin.id), 403, 'IMPERSONATION_FORBIDDEN')
    const otherAdmin = await newUser(t.app, { organizationId, role: 'admin' })
    expectProblem(await start(own, otherAdmin.id), 403, 'IMPERSONATION_FORBIDDEN')
    const leaver = await newUser(t.app, { organizationId })
    const deactivated = await asUser(t.app, own, {
      method: 'POST',
      url: `/api/users/${leaver.id}/deactivate`,
    })
    expect(deactivated.statusCode).toBe(200)
    expectProblem(await start(own, leaver.id), 403, 'IMPERSONATION_FORBIDDEN')
    const stranger = await newUser(t.app)
    expectProblem(await start(own, stranger.id), 404, 'NOT_FOUND')
    const colleague = await signIn(t.app, await newUser(t.app, { organizationId }))
    expectProblem(await start(colleague, member.id), 403, 'ACCESS_DENIED')
    expectProblem(await start(null, member.id), 401, 'AUTHENTICATION_REQUIRED')
    expectProblem(await start(own, member.id, { reason: '' }), 400, 'VALIDATION_FAILED')
  })

  it('refuses to start another impersonation while impersonating', async () => {
    const { as } = await impersonating()
    const other = await newUser(t.app, { organizationId })
    expectProblem(await start(as, other.id), 403, 'IMPERSONATION_FORBIDDEN')
  })

  it("needs the admin's second factor: given with the request, or a sign-in with it less than 5 minutes ago", async () => {
    const secured = await newUser(t.app, { organizationId, role: 'admin' })
    let session = await signIn(t.app, secured)
    const setup = await asUser(t.app, session, { method: 'POST', url: '/api/auth/otp/setup' })
    const secret = setup.json().secret as string
    const code = (offsetMs = 0) =>
      new TOTP({ secret: Secret.fromBase32(secret), digits: 6, period: 30 }).generate({
        timestamp: t.clock.now().getTime() + offsetMs,
      })
    const enabled = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/auth/otp/enable',
      payload: { code: code() },
    })
    expect(enabled.statusCode).toBe(200)
    // The session from before OTP was on signed in without it.
    expectProblem(await start(session, member.id), 403, 'OTP_REQUIRED')
    expectProblem(await start(session, member.id, { reason: REASON, otpCode: '000000' }), 403, 'INVALID_OTP')
    t.clock.advance(60_000)
    const given = await start(session, member.id, { reason: REASON, otpCode: code() })
    expect(given.statusCode).toBe(200)

    t.clock.advance(60_000)
    session = await signIn(t.app, secured, { otpCode: code() })
    expect((await start(session, member.id)).statusCode).toBe(200)
    t.clock.advance(5 * 60_000 + 1000)
    expectProblem(await start(session, member.id), 403, 'OTP_REQUIRED')
  })
})

describe('while impersonating', () => {
  it('refuses credentials, API keys and user administration with IMPERSONATION_FORBIDDEN', async () => {
    const { as } = await impersonating()
    const refused: [string, string, object | undefined][] = [
      ['POST', '/api/auth/password/change', { currentPassword: 'x', newPassword: 'another long password' }],
      ['POST', '/api/account/email', { email: 'new@example.com', currentPassword: 'x' }],
      ['POST', '/api/auth/otp/setup', undefined],
      ['POST', '/api/auth/otp/disable', undefined],
      ['POST', '/api/auth/passkeys/registration/options', undefined],
      ['GET', '/api/api-keys', undefined],
      ['POST', '/api/api-keys', { description: 'k', scopes: [] }],
      ['GET', '/api/users', undefined],
      ['POST', `/api/users/${admin.id}/deactivate`, undefined],
      ['POST', '/api/account/identities/link', { provider: 'any' }],
      ['DELETE', '/api/account/identities/00000000-0000-4000-8000-000000000000', undefined],
    ]
    for (const [method, url, payload] of refused) {
      const res = await asUser(t.app, as, { method: method as 'GET', url, ...(payload ? { payload } : {}) })
      expect({ url, status: res.statusCode, code: res.json().code }).toEqual({
        url,
        status: 403,
        code: 'IMPERSONATION_FORBIDDEN',
      })
    }
    // What the member may do is allowed.
    expect((await asUser(t.app, as, { method: 'GET', url: '/api/auth/sessions' })).statusCode).toBe(200)
    expect((await asUser(t.app, as, { method: 'GET', url: '/api/account/identities' })).statusCode).toBe(200)
  })

  it('records what the impersonation session changes as the admin’s, on the member’s behalf, webhooks too', async () => {
    // An endpoint of the organization subscribed to both events (its secret is never read here).
    const endpoint = await t.app.db
      .insertInto('webhook_endpoints')
      .values({
        organization_id: organizationId,
        url: 'https://hooks.example.com/platform',
        event_types: ['impersonation.started', 'session.revoked'],
        secret: 'sealed elsewhere',
        previous_secret: null,
        previous_secret_expires_at: null,
        disabled_reason: null,
        failing_since: null,
        created_at: t.clock.now(),
        updated_at: t.clock.now(),
      })
      .returning('id')
      .executeTakeFirstOrThrow()
    const memberOwn = await signIn(t.app, member)
    const { as } = await impersonating()
    const revoked = await asUser(t.app, as, {
      method: 'DELETE',
      url: `/api/auth/sessions/${memberOwn.sessionId}`,
    })
    expect(revoked.statusCode).toBe(204)
    const event = (await events('session.revoked')).find((e) => e.subject_id === memberOwn.sessionId)
    expect(event).toMatchObject({
      actor_type: 'user',
      actor_id: admin.id,
      subject_type: 'session',
      data: { reason: 'revoked_by_user', onBehalfOf: member.id },
    })
    // Messages are queued when the events are chained.
    await t.app.services.auditChainer.drain()
    const messages = await t.app.db
      .selectFrom('webhook_outbox')
      .select(['event_type', 'payload'])
      .where('endpoint_id', '=', endpoint.id)
      .orderBy('created_at')
      .execute()
    const bodies = messages.map((m) => ({ type: m.event_type, data: JSON.parse(m.payload).data }))
    expect(bodies.find((m) => m.type === 'impersonation.started')?.data).toMatchObject({
      actor: { type: 'user', id: admin.id },
      subject: { type: 'user', id: member.id },
    })
    expect(bodies.find((m) => m.type === 'session.revoked')?.data).toMatchObject({
      actor: { type: 'user', id: admin.id },
      subject: { type: 'session', id: memberOwn.sessionId },
      data: { onBehalfOf: member.id },
    })
    await t.app.db.deleteFrom('webhook_endpoints').where('id', '=', endpoint.id).execute()
  })
})

describe('stopping', () => {
  it("revokes the impersonation at once and gives the admin's own session back", async () => {
    const { own, as } = await impersonating()
    // The admin's own refresh cookie was replaced: it is retired until the impersonation stops.
    expect((await refresh(t.app, own)).statusCode).toBe(401)
    const res = await stop(t.app, as)
    const back = sessionOf(res)
    expect(back).toMatchObject({ userId: admin.id, sessionId: own.sessionId })
    expect(claimsOf(back.access).act).toBeUndefined()
    expect((await me(t.app, back)).json()).toMatchObject({ userId: admin.id, impersonatorId: null })
    expect((await me(t.app, as)).statusCode).toBe(401)
    expect((await refresh(t.app, as)).statusCode).toBe(401)
    expect((await refresh(t.app, back)).statusCode).toBe(200)
    const stopped = (await events('impersonation.stopped')).at(-1)
    expect(stopped).toMatchObject({
      actor_id: admin.id,
      subject_type: 'user',
      subject_id: member.id,
      data: { sessionId: as.sessionId },
    })
    // Not impersonating: nothing to stop.
    expectProblem(await stop(t.app, back), 404, 'NOT_FOUND')
  })

  it('ends when the admin holding it is deactivated', async () => {
    const leaving = await newUser(t.app, { organizationId, role: 'admin' })
    const own = await signIn(t.app, leaving)
    const as = sessionOf(await start(own, member.id))
    expect((await me(t.app, as)).statusCode).toBe(200)
    const boss = await signIn(t.app, admin)
    const res = await asUser(t.app, boss, { method: 'POST', url: `/api/users/${leaving.id}/deactivate` })
    expect(res.statusCode).toBe(200)
    // The deactivation's revocation, pushed to every instance, this one included.
    await pollUntil(
      'the deactivated admin’s impersonation refused',
      async () => (await me(t.app, as)).statusCode === 401,
      20_000,
    )
  })

  it('ends at the maximum duration: no refresh past it, whatever the refresh lifetime', async () => {
    const { as } = await impersonating()
    expect(Number(claimsOf(as.access).exp)).toBeLessThanOrEqual(t.clock.now().getTime() / 1000 + 3600)
    t.clock.advance(50 * 60_000)
    const late = sessionOf(await refresh(t.app, as))
    // 10 minutes left: the access token does not outlive the session.
    expect(Number(claimsOf(late.access).exp)).toBeLessThanOrEqual(t.clock.now().getTime() / 1000 + 600)
    t.clock.advance(11 * 60_000)
    expectProblem(await refresh(t.app, late), 401, 'REFRESH_TOKEN_INVALID')
    expect((await me(t.app, late)).statusCode).toBe(401)
  })

  it('on instance A refuses the impersonation token on instance B', async () => {
    const url = t.database.url
    const handle = url ? openPostgres(url, { poolSize: 4 }) : undefined
    let b: TestApp | undefined
    try {
      b = await createTestApp({
        database: handle && url ? { handle, url, dispose: () => handle.close() } : t.database,
        clock: t.clock,
        config: { ...CONFIG, 'platform.auth.jwt.secret': t.config.auth.jwt.secret },
      })
      const onB = b.app
      const { as } = await impersonating()
      expect((await me(onB, as)).statusCode).toBe(200)
      const res = await stop(t.app, as)
      expect(res.statusCode).toBe(200)
      const seen = new Set<number>()
      await pollUntil(
        'B refusing the stopped impersonation',
        async () => {
          const status = ((await me(onB, as)) as LightMyRequestResponse).statusCode
          seen.add(status)
          return status === 401
        },
        20_000,
        2,
      )
      expect([...seen].filter((status) => status !== 200 && status !== 401)).toEqual([])
    } finally {
      await b?.close()
      await handle?.close()
    }
  })
})
