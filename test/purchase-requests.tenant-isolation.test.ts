import { randomUUID } from 'node:crypto'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import { describe, expect, it } from 'vitest'
import { AuthorizationUnavailableError } from '../src/authz/port.ts'
import {
  type Actor,
  asUser,
  expectProblem,
  newActor,
  newOrganization,
  type Session,
} from './helpers/accounts.ts'
import { useAuthzTestApp } from './helpers/authz.ts'
import { newDeliveredApiKey, serviceBearer } from './helpers/machines.ts'

// Purchase requests across organizations and principal kinds: another organization's request is
// out of reach, every route needs credentials, API keys are bounded by their scopes and
// organization, service accounts have no organization, and an authorization server that is down
// delays the creator's access without losing it.

const t = useAuthzTestApp()

async function organization(): Promise<{ member: Actor; admin: Actor; organizationId: string }> {
  const member = await newActor(t.app)
  const admin = await newActor(t.app, { organizationId: member.user.organizationId, role: 'admin' })
  return { member, admin, organizationId: member.user.organizationId }
}

type Credentials = { session: Session } | { headers: Record<string, string> } | null

function call(who: Credentials, options: InjectOptions): Promise<LightMyRequestResponse> {
  if (who && 'session' in who) return asUser(t.app, who.session, options)
  return t.app.inject({ ...options, ...(who ? { headers: who.headers } : {}) })
}

const create = (who: Credentials, title = `Monitors ${randomUUID().slice(0, 8)}`) =>
  call(who, { method: 'POST', url: '/api/purchase-requests', payload: { title } })
const list = (who: Credentials, query = '') =>
  call(who, { method: 'GET', url: `/api/purchase-requests${query}` })
const get = (who: Credentials, id: string) =>
  call(who, { method: 'GET', url: `/api/purchase-requests/${id}` })
const history = (who: Credentials, id: string) =>
  call(who, { method: 'GET', url: `/api/purchase-requests/${id}/history` })
const move = (who: Credentials, id: string, action: 'submit' | 'approve') =>
  call(who, { method: 'POST', url: `/api/purchase-requests/${id}/${action}` })

async function created(who: Credentials): Promise<string> {
  const res = await create(who)
  expect(res.statusCode).toBe(201)
  return res.json().id
}

/** The stored request, its audit rows and the approval emails queued for its organization. */
async function snapshot(id: string) {
  const row = await t.app.db
    .selectFrom('purchase_requests')
    .selectAll()
    .where('id', '=', id)
    .executeTakeFirstOrThrow()
  const events = await t.app.db
    .selectFrom('purchase_request_events')
    .selectAll()
    .where('purchase_request_id', '=', id)
    .orderBy('id')
    .execute()
  const mails = await t.app.db
    .selectFrom('mail_outbox')
    .select('id')
    .where('organization_id', '=', row.organization_id)
    .where('template', '=', 'purchase_request_approved')
    .execute()
  return { row, events, mails }
}

describe("another organization's purchase request", () => {
  it('answers GET, history, submit and approve with 403 ACCESS_DENIED and changes nothing', async () => {
    const owner = await organization()
    const other = await organization()
    const draft = await created(owner.member)
    const pending = await created(owner.member)
    expect((await move(owner.member, pending, 'submit')).statusCode).toBe(200)
    const before = { draft: await snapshot(draft), pending: await snapshot(pending) }
    t.clock.advanceSeconds(10)

    for (const outsider of [other.member, other.admin]) {
      for (const id of [draft, pending]) {
        expectProblem(await get(outsider, id), 403, 'ACCESS_DENIED')
        expectProblem(await history(outsider, id), 403, 'ACCESS_DENIED')
        expectProblem(await move(outsider, id, 'submit'), 403, 'ACCESS_DENIED')
        expectProblem(await move(outsider, id, 'approve'), 403, 'ACCESS_DENIED')
      }
    }

    expect(await snapshot(draft)).toEqual(before.draft)
    expect(await snapshot(pending)).toEqual(before.pending)
    expect((await get(owner.member, pending)).json().status).toBe('SUBMITTED')
  })

  it("lists only the caller's organization's requests", async () => {
    const first = await organization()
    const second = await organization()
    const firstIds = [await created(first.member), await created(first.admin), await created(first.member)]
    const secondIds = [await created(second.member), await created(second.admin)]

    for (const [who, ids, organizationId] of [
      [first.member, firstIds, first.organizationId],
      [first.admin, firstIds, first.organizationId],
      [second.member, secondIds, second.organizationId],
    ] as const) {
      const res = await list(who, '?limit=100')
      expect(res.statusCode).toBe(200)
      const items: { id: string; organizationId: string }[] = res.json().items
      expect(items.map((item) => item.id).sort()).toEqual([...ids].sort())
      expect(new Set(items.map((item) => item.organizationId))).toEqual(new Set([organizationId]))
    }
  })
})

describe('unauthenticated callers', () => {
  it('get 401 AUTHENTICATION_REQUIRED on every purchase-request route', async () => {
    const { member } = await organization()
    const id = await created(member)
    const requests: InjectOptions[] = [
      { method: 'POST', url: '/api/purchase-requests', payload: { title: 'Chairs' } },
      { method: 'POST', url: '/api/purchase-requests', payload: { title: '' } },
      { method: 'GET', url: '/api/purchase-requests' },
      { method: 'GET', url: `/api/purchase-requests/${id}` },
      { method: 'GET', url: '/api/purchase-requests/not-a-uuid' },
      { method: 'GET', url: `/api/purchase-requests/${id}/history` },
      { method: 'POST', url: `/api/purchase-requests/${id}/submit` },
      { method: 'POST', url: `/api/purchase-requests/${id}/approve` },
    ]
    const before = await snapshot(id)
    for (const credentials of [null, { headers: { 'x-api-key': 'sk_live_not-a-real-key' } }]) {
      for (const request of requests) {
        const res = await call(credentials, request)
        expect(res.statusCode, `${request.method} ${request.url}`).toBe(401)
        expectProblem(res, 401, 'AUTHENTICATION_REQUIRED')
      }
    }
    expect(await snapshot(id)).toEqual(before)
  })
})

describe('API keys', () => {
  it("with purchase_requests:read list and read their organization's requests but get 403 INSUFFICIENT_SCOPE on writes", async () => {
    const { member, organizationId } = await organization()
    const id = await created(member)
    const reader = await newDeliveredApiKey(t.app, organizationId, ['purchase_requests:read'])

    const page = await list(reader)
    expect(page.statusCode).toBe(200)
    expect(page.json().items.map((item: { id: string }) => item.id)).toEqual([id])
    const one = await get(reader, id)
    expect(one.statusCode).toBe(200)
    expect(one.json()).toMatchObject({ id, organizationId, createdBy: member.user.id })
    expect((await history(reader, id)).statusCode).toBe(200)

    const before = await snapshot(id)
    expectProblem(await create(reader), 403, 'INSUFFICIENT_SCOPE')
    expectProblem(await move(reader, id, 'submit'), 403, 'INSUFFICIENT_SCOPE')
    expectProblem(await move(reader, id, 'approve'), 403, 'INSUFFICIENT_SCOPE')
    expect(await snapshot(id)).toEqual(before)
    expect((await list(member)).json().items).toHaveLength(1)
  })

  it("with purchase_requests:read cannot read another organization's request", async () => {
    const owner = await organization()
    const id = await created(owner.member)
    const outsider = await newDeliveredApiKey(t.app, await newOrganization(t.app), ['purchase_requests:read'])

    expectProblem(await get(outsider, id), 403, 'ACCESS_DENIED')
    expectProblem(await history(outsider, id), 403, 'ACCESS_DENIED')
    expect((await list(outsider)).json()).toEqual({ items: [], nextCursor: null })
  })

  it('with purchase_requests:write (an organization admin in the model) create, submit and approve', async () => {
    const { member, organizationId } = await organization()
    const writer = await newDeliveredApiKey(t.app, organizationId, ['purchase_requests:write'])

    const res = await create(writer, 'Licences for the build farm')
    expect(res.statusCode).toBe(201)
    expect(res.json()).toMatchObject({
      organizationId,
      createdBy: writer.id,
      title: 'Licences for the build farm',
      status: 'DRAFT',
    })
    const id = res.json().id
    expect((await move(writer, id, 'submit')).json().status).toBe('SUBMITTED')
    expect((await move(writer, id, 'approve')).json().status).toBe('APPROVED')

    // A member of the organization sees the key's work; the key has no mailbox, so no email.
    expect((await history(member, id)).json().items).toEqual([
      expect.objectContaining({ action: 'submit', actorId: writer.id }),
      expect.objectContaining({ action: 'approve', actorId: writer.id }),
    ])
    expect((await snapshot(id)).mails).toEqual([])

    // It approves a member's request too.
    const memberRequest = await created(member)
    expect((await move(member, memberRequest, 'submit')).statusCode).toBe(200)
    expect((await move(writer, memberRequest, 'approve')).json().status).toBe('APPROVED')
  })
})

describe('service accounts', () => {
  it('have no organization: 403 ORGANIZATION_REQUIRED on create and list', async () => {
    const service = {
      headers: await serviceBearer(t.app, ['purchase_requests:read', 'purchase_requests:write']),
    }
    const { member } = await organization()
    const id = await created(member)

    expectProblem(await create(service), 403, 'ORGANIZATION_REQUIRED')
    expectProblem(await list(service), 403, 'ORGANIZATION_REQUIRED')
    expectProblem(await get(service, id), 403, 'ACCESS_DENIED')
    expect(await snapshot(id)).toMatchObject({ events: [], row: { status: 'DRAFT' } })
  })
})

describe('the authorization server down while a request is created', () => {
  it('leaves the request unreadable until the ownership tuple is delivered, then readable by its creator', async () => {
    const { member, organizationId } = await organization()
    t.port.failures.write = new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')
    const attempts = t.port.attempts

    const res = await create(member)

    // The request is committed; only the ownership tuple waits in the outbox.
    expect(res.statusCode).toBe(201)
    const id = res.json().id
    // Delivery starts after the response without holding it: wait for the run it started.
    await t.app.authz.outbox.runOnce()
    expect(t.port.attempts).toBeGreaterThan(attempts)
    expect(await t.app.authz.outbox.pending()).toBe(1)
    expect((await snapshot(id)).row).toMatchObject({ organization_id: organizationId, status: 'DRAFT' })
    expectProblem(await get(member, id), 403, 'ACCESS_DENIED')

    // Healed, but the failed delivery is backing off: nothing is delivered before it is due.
    t.port.failures = {}
    expect(await t.app.authz.outbox.runOnce()).toBe(0)
    expectProblem(await get(member, id), 403, 'ACCESS_DENIED')

    const queued = await t.app.db
      .selectFrom('authz_outbox')
      .select('next_attempt_at')
      .where('processed_at', 'is', null)
      .executeTakeFirstOrThrow()
    expect(queued.next_attempt_at.getTime()).toBeGreaterThan(t.clock.now().getTime())
    t.clock.advance(queued.next_attempt_at.getTime() - t.clock.now().getTime() + 1)

    expect(await t.app.authz.outbox.runOnce()).toBe(1)
    expect(await t.app.authz.outbox.pending()).toBe(0)
    const read = await get(member, id)
    expect(read.statusCode).toBe(200)
    expect(read.json()).toEqual(res.json())
    expect((await move(member, id, 'submit')).json().status).toBe('SUBMITTED')
  })
})
