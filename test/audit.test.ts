import type { LightMyRequestResponse } from 'fastify'
import { type Selectable, sql } from 'kysely'
import { describe, expect, it, onTestFinished } from 'vitest'
import { ChainKeys, verifyStoredChain } from '../src/audit/index.ts'
import { inTransaction } from '../src/db/database.ts'
import type { AuditEventTable } from '../src/db/schema.ts'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  expectProblem,
  newActor,
  newOrganization,
  newUser,
  PASSWORD,
  type Session,
  signIn,
} from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { newDeliveredApiKey } from './helpers/machines.ts'

// The audit trail: events recorded in the transaction of the change they report, with the actor,
// the subject, the client address, user agent and request id of the request behind them; each
// organization's events hash-chained (src/audit/chain.ts), so `audit verify` names the first event
// that was edited, removed or moved; read by an organization's admins and `audit:read` keys only.

const t = useTestApp({
  config: { ...ACCOUNT_TEST_CONFIG, 'platform.auth.rate-limit.login-per-minute': '1000' },
})

const AGENT = 'audit-test/1.0'
const IP = '203.0.113.7'

type EventRow = Selectable<AuditEventTable>

const eventsOf = (type: string, subjectId?: string): Promise<EventRow[]> => {
  let query = t.app.db.selectFrom('audit_events').selectAll().where('type', '=', type)
  if (subjectId) query = query.where('subject_id', '=', subjectId)
  return query.execute() as Promise<EventRow[]>
}

/** Exactly one event of `type` about `subjectId`, carrying the request's origin. */
async function oneEvent(type: string, subjectId: string, res?: LightMyRequestResponse): Promise<EventRow> {
  const events = await eventsOf(type, subjectId)
  expect(events, type).toHaveLength(1)
  const event = events[0] as EventRow
  if (res) {
    expect(event.ip_address).toBe(IP)
    expect(event.user_agent).toBe(AGENT)
    expect(event.request_id).toBe(res.headers['x-request-id'])
  }
  return event
}

const from = { remoteAddress: IP, headers: { 'user-agent': AGENT } }
const login = (email: string, password = PASSWORD) =>
  t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { username: email, password }, ...from })
const as = (session: Session, options: Parameters<typeof asUser>[2]) =>
  asUser(t.app, session, { ...options, ...from, headers: { ...from.headers, ...(options.headers ?? {}) } })

describe('events recorded with the change they report', () => {
  it('records a sign-in with the session, the user as actor and the request’s origin', async () => {
    const user = await newUser(t.app)
    const res = await login(user.email)
    expect(res.statusCode).toBe(200)
    const event = await oneEvent('sign_in.succeeded', res.json().sessionId, res)
    expect(event).toMatchObject({
      organization_id: user.organizationId,
      actor_type: 'user',
      actor_id: user.id,
      subject_type: 'session',
      data: { method: 'password' },
    })
  })

  it('records a failed sign-in in the organization of a known account, and an unknown one outside any', async () => {
    const user = await newUser(t.app)
    const wrong = await login(user.email, 'not the password at all')
    expect(wrong.statusCode).toBe(401)
    const known = await oneEvent('sign_in.failed', user.id, wrong)
    expect(known).toMatchObject({
      organization_id: user.organizationId,
      actor_type: 'system',
      data: { reason: 'password' },
    })

    const email = `nobody-${Date.now()}@example.com`
    const unknown = await login(email)
    expect(unknown.statusCode).toBe(401)
    const events = (await eventsOf('sign_in.failed')).filter((e) => e.data.username === email)
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({ organization_id: null, subject_id: null, ip_address: IP })
  })

  it('records the refusal of a locked account', async () => {
    const user = await newUser(t.app)
    for (let i = 0; i < 5; i++) await login(user.email, 'wrong password number x')
    const res = await login(user.email)
    expectProblem(res, 401, 'ACCOUNT_LOCKED')
    await oneEvent('sign_in.locked', user.id, res)
  })

  it('records one revoked session, logout everywhere and refresh reuse', async () => {
    const user = await newUser(t.app)
    const kept = await signIn(t.app, user)
    const revoked = await signIn(t.app, user)
    const res = await as(kept, { method: 'DELETE', url: `/api/auth/sessions/${revoked.sessionId}` })
    expect(res.statusCode).toBe(204)
    expect(await oneEvent('session.revoked', revoked.sessionId, res)).toMatchObject({
      actor_id: user.id,
      data: { reason: 'revoked_by_user' },
    })

    const reused = await signIn(t.app, user)
    const rotate = (token: string) =>
      t.app.inject({ method: 'POST', url: '/api/auth/refresh', cookies: { refresh_token: token }, ...from })
    expect((await rotate(reused.refresh)).statusCode).toBe(200)
    const reuse = await rotate(reused.refresh)
    expectProblem(reuse, 401, 'REFRESH_TOKEN_REUSED')
    expect(await oneEvent('refresh_token.reused', reused.sessionId, reuse)).toMatchObject({
      actor_type: 'system',
    })

    const all = await as(kept, { method: 'POST', url: '/api/auth/logout-all' })
    expect(all.statusCode).toBe(204)
    expect(await oneEvent('sessions.revoked_all', user.id, all)).toMatchObject({ actor_id: user.id })
  })

  it('records a deactivation with the admin as actor; one refused (last admin) records none', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.user.organizationId })
    const res = await as(admin.session, { method: 'POST', url: `/api/users/${member.id}/deactivate` })
    expect(res.statusCode).toBe(200)
    expect(await oneEvent('user.deactivated', member.id, res)).toMatchObject({
      actor_type: 'user',
      actor_id: admin.user.id,
      organization_id: admin.user.organizationId,
    })
    const self = await as(admin.session, { method: 'POST', url: `/api/users/${admin.user.id}/deactivate` })
    expectProblem(self, 409, 'LAST_ADMIN')
    expect(await eventsOf('user.deactivated', admin.user.id)).toEqual([])
  })

  it('records API keys and service accounts made and ended by operators, with the system as actor', async () => {
    const organizationId = await newOrganization(t.app)
    const key = await t.app.services.apiKeys.create({
      organizationId,
      scopes: ['files:read'],
      description: 'x',
      expiresAt: null,
    })
    await t.app.services.apiKeys.revoke(key.id)
    expect(await oneEvent('api_key.created', key.id)).toMatchObject({
      organization_id: organizationId,
      actor_type: 'system',
    })
    expect(await oneEvent('api_key.revoked', key.id)).toMatchObject({ data: { keyPrefix: key.keyPrefix } })

    const account = await t.app.services.serviceAccounts.create({
      clientId: `audit-${Date.now()}`,
      description: 'x',
      scopes: [],
    })
    await t.app.services.serviceAccounts.disable(account.clientId)
    expect(await oneEvent('service_account.created', account.id)).toMatchObject({ organization_id: null })
    await oneEvent('service_account.disabled', account.id)
  })

  it('records nothing for a change that rolls back', async () => {
    const organizationId = await newOrganization(t.app)
    await expect(
      inTransaction(t.app.db, async (trx) => {
        await t.app.services.audit.record(trx, {
          type: 'test.rolled_back',
          organizationId,
          actor: { type: 'system', id: null },
        })
        throw new Error('the change fails')
      }),
    ).rejects.toThrow('the change fails')
    expect(await eventsOf('test.rolled_back')).toEqual([])
    // The chain did not move either: the next event is its first.
    await inTransaction(t.app.db, (trx) =>
      t.app.services.audit.record(trx, {
        type: 'test.kept',
        organizationId,
        actor: { type: 'system', id: null },
      }),
    )
    await t.app.services.auditChainer.idle()
    const [kept] = await t.app.db
      .selectFrom('audit_events')
      .select('sequence')
      .where('chain', '=', organizationId)
      .execute()
    expect(kept?.sequence).toBe('1')
  })
})

describe('the chain', () => {
  /** An organization with `count` events of its own. */
  async function chainOf(count: number): Promise<string> {
    const organizationId = await newOrganization(t.app)
    for (let i = 0; i < count; i++) {
      await inTransaction(t.app.db, (trx) =>
        t.app.services.audit.record(trx, {
          type: 'test.event',
          organizationId,
          actor: { type: 'system', id: null },
          data: { n: i },
        }),
      )
    }
    await t.app.services.auditChainer.idle()
    return organizationId
  }
  async function chainOfMore(organizationId: string, count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      await inTransaction(t.app.db, (trx) =>
        t.app.services.audit.record(trx, {
          type: 'test.later',
          organizationId,
          actor: { type: 'system', id: null },
        }),
      )
    }
    await t.app.services.auditChainer.idle()
  }
  const verify = (chain: string) => verifyStoredChain(t.app.db, t.app.services.audit.keys, chain)

  it('verifies an untouched chain and reports its head', async () => {
    const chain = await chainOf(5)
    const result = await verify(chain)
    expect(result).toMatchObject({ ok: true, events: 5, head: { sequence: 5 } })
  })

  it('names the event whose data was edited', async () => {
    const chain = await chainOf(5)
    await t.app.db
      .updateTable('audit_events')
      .set({ data: JSON.stringify({ n: 99 }) })
      .where('chain', '=', chain)
      .where('sequence', '=', '3' as never)
      .execute()
    expect(await verify(chain)).toMatchObject({ ok: false, sequence: 3 })
  })

  it('names the sequence of a deleted middle event', async () => {
    const chain = await chainOf(5)
    await t.app.db
      .deleteFrom('audit_events')
      .where('chain', '=', chain)
      .where('sequence', '=', '3' as never)
      .execute()
    expect(await verify(chain)).toMatchObject({ ok: false, sequence: 3 })
  })

  it('names where two events were swapped', async () => {
    const chain = await chainOf(5)
    // Two rows trade places (through a free number: the pair is unique).
    const renumber = (was: number, now: number) =>
      sql`update audit_events set sequence = ${now} where chain = ${chain} and sequence = ${was}`.execute(
        t.app.db,
      )
    await renumber(2, -2)
    await renumber(4, 2)
    await renumber(-2, 4)
    expect(await verify(chain)).toMatchObject({ ok: false, sequence: 2 })
  })

  it('verifies events hashed with a previous chain key once a new one hashes', async () => {
    const chain = await chainOf(3)
    const previous = t.app.services.audit.keys.current
    const rotated = new ChainKeys(Buffer.alloc(32, 7), [previous])
    expect(await verifyStoredChain(t.app.db, rotated, chain)).toMatchObject({ ok: true, events: 3 })
    expect(await verifyStoredChain(t.app.db, new ChainKeys(Buffer.alloc(32, 7)), chain)).toMatchObject({
      ok: false,
      sequence: 1,
    })
  })

  it('removes what is older than the retention from the start of each chain only', async () => {
    const DAY = 86_400
    const chain = await chainOf(3)
    t.clock.advanceSeconds(200 * DAY)
    await chainOfMore(chain, 1)
    // A late event stamped with an old time (a clock that went back) does not cut the chain in the middle.
    t.clock.advanceSeconds(-300 * DAY)
    await chainOfMore(chain, 1)
    t.clock.advanceSeconds(300 * DAY)
    t.clock.advanceSeconds(201 * DAY)
    await t.app.housekeeping.runOnce()
    const left = await t.app.db
      .selectFrom('audit_events')
      .select('sequence')
      .where('chain', '=', chain)
      .execute()
    expect(left.map((row) => row.sequence)).toEqual(['4', '5'])
    expect(await verify(chain)).toMatchObject({ ok: true, events: 2, head: { sequence: 5 } })
  })

  it('keeps an old event that is not chained yet while removing the old chained ones, and removes it once chained', async () => {
    const DAY = 86_400
    const chain = await chainOf(2)
    // Its writer committed and nothing chained it yet: the chainer is stopped (no sweep, no nudge).
    const chainer = t.app.services.auditChainer
    await chainer.stop()
    onTestFinished(() => chainer.start())
    await t.app.db.transaction().execute((trx) =>
      t.app.services.audit.record(trx, {
        type: 'test.unchained',
        organizationId: chain,
        actor: { type: 'system', id: null },
      }),
    )
    const events = () =>
      t.app.db
        .selectFrom('audit_events')
        .select(['type', 'sequence'])
        .where('chain', '=', chain)
        .orderBy('position')
        .execute()
    // All three are past the retention (400 days).
    t.clock.advanceSeconds(401 * DAY)
    await t.app.housekeeping.runOnce()
    expect(await events()).toEqual([{ type: 'test.unchained', sequence: null }])
    // Chained later, after the events before it went: it follows the head, and what is left verifies.
    await chainer.drain()
    expect(await events()).toEqual([{ type: 'test.unchained', sequence: '3' }])
    expect(await verify(chain)).toMatchObject({ ok: true, events: 1, head: { sequence: 3 }, unchained: 0 })
    // Chained and old, it goes as the others did.
    await t.app.housekeeping.runOnce()
    expect(await events()).toEqual([])
  })

  it('still verifies what retention leaves, and refuses a key it does not know', async () => {
    const chain = await chainOf(4)
    await t.app.db
      .deleteFrom('audit_events')
      .where('chain', '=', chain)
      .where('sequence', '<=', '2' as never)
      .execute()
    expect(await verify(chain)).toMatchObject({ ok: true, events: 2, head: { sequence: 4 } })
    const stranger = ChainKeys.derivedFrom([Buffer.alloc(32, 9)])
    expect(await verifyStoredChain(t.app.db, stranger, chain)).toMatchObject({ ok: false, sequence: 3 })
  })
})

describe('reading the trail', () => {
  it('shows an organization’s admins their events newest first, with the head, and pages by cursor', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    for (let i = 0; i < 3; i++) await signIn(t.app, admin.user)
    const page = await as(admin.session, {
      method: 'GET',
      url: '/api/audit-events?limit=2&type=sign_in.succeeded',
    })
    expect(page.statusCode).toBe(200)
    const body = page.json()
    expect(body.items).toHaveLength(2)
    expect(body.items[0].sequence).toBeGreaterThan(body.items[1].sequence)
    expect(body.head.sequence).toBeGreaterThanOrEqual(body.items[0].sequence)
    const next = await as(admin.session, {
      method: 'GET',
      url: `/api/audit-events?limit=2&type=sign_in.succeeded&cursor=${body.nextCursor}`,
    })
    expect(next.json().items.length).toBeGreaterThanOrEqual(1)
    expect(next.json().items[0].sequence).toBeLessThan(body.items[1].sequence)
  })

  it('refuses members, lets audit:read keys read, and never shows another organization’s events', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const member = await newActor(t.app, { organizationId: admin.user.organizationId })
    expectProblem(await as(member.session, { method: 'GET', url: '/api/audit-events' }), 403, 'ACCESS_DENIED')
    const key = await newDeliveredApiKey(t.app, admin.user.organizationId, ['audit:read'])
    const byKey = await t.app.inject({ method: 'GET', url: '/api/audit-events', headers: key.headers })
    expect(byKey.statusCode).toBe(200)
    const other = await newActor(t.app, { role: 'admin' })
    const theirs = await as(other.session, { method: 'GET', url: '/api/audit-events?limit=200' })
    const subjects = theirs.json().items.map((e: { subject: { id: string } | null }) => e.subject?.id)
    expect(subjects).not.toContain(admin.session.sessionId)
    expect(subjects).not.toContain(member.session.sessionId)
  })

  it('exports every matching event as NDJSON, oldest first, naming the head', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    for (let i = 0; i < 3; i++) await signIn(t.app, admin.user)
    const res = await as(admin.session, {
      method: 'GET',
      url: '/api/audit-events/export?type=sign_in.succeeded',
    })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/)
    const lines = res.body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
    expect(lines).toHaveLength(4)
    expect(lines.map((e) => e.sequence)).toEqual([...lines.map((e) => e.sequence)].sort((a, b) => a - b))
    const [sequence] = String(res.headers['x-audit-head']).split(':')
    expect(Number(sequence)).toBeGreaterThanOrEqual(lines.at(-1).sequence)
    // The export renders each event exactly as a page does.
    const page = await as(admin.session, {
      method: 'GET',
      url: '/api/audit-events?type=sign_in.succeeded&limit=200',
    })
    const listed = new Map(page.json().items.map((e: { id: string }) => [e.id, e]))
    for (const line of lines) expect(line).toEqual(listed.get(line.id))
  })
})
