import { randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { afterAll, describe, expect, it } from 'vitest'
import type { AuthorizationPort, CheckRequest, TupleKey } from '../src/authz/port.ts'
import type { Role } from '../src/db/schema.ts'
import {
  type Actor,
  asUser,
  deliverMail,
  expectProblem,
  FRONTEND_URL,
  mailsTo,
  newActor,
  UUID,
  useMailTestApp,
} from './helpers/accounts.ts'
import { testAuthorizationPort } from './helpers/authz-adapter.ts'

// The purchase-request workflow over HTTP: create, submit and approve with their
// audit rows, the approval email over real SMTP, invalid moves, title validation, who may move a
// request, and two approvals racing for one request.

/**
 * The adapter under test behind a gate: while armed, `can_edit` checks on one object wait until
 * `expected` of them are waiting, then all go on. A move reads the request before it checks
 * `can_edit`, so a full gate proves both racers read the same status before either wrote.
 */
class GatedPort implements AuthorizationPort {
  inner: AuthorizationPort | undefined
  gate: { object: string; expected: number; waiting: (() => void)[] } | undefined

  #port(): AuthorizationPort {
    if (!this.inner) throw new Error('the gated port is not wired to the app yet')
    return this.inner
  }

  async check(request: CheckRequest): Promise<boolean> {
    const gate = this.gate
    if (gate && request.relation === 'can_edit' && request.object === gate.object) {
      const { promise, resolve } = Promise.withResolvers<void>()
      gate.waiting.push(resolve)
      if (gate.waiting.length === gate.expected) for (const release of gate.waiting) release()
      await promise
    }
    return this.#port().check(request)
  }

  write(writes: TupleKey[], deletes: TupleKey[]): Promise<void> {
    return this.#port().write(writes, deletes)
  }

  ready(): Promise<void> {
    return this.#port().ready()
  }

  async close(): Promise<void> {
    await this.inner?.close()
  }
}

const port = new GatedPort()
const t = useMailTestApp({
  deps: { authorization: port },
  configure: async (app) => {
    port.inner = await testAuthorizationPort(app.db)
  },
})
afterAll(() => port.close())

const actor = (options: { organizationId?: string; role?: Role } = {}) => newActor(t.app, options)

/** A member who creates requests and an admin of the same organization. */
async function organization(): Promise<{ creator: Actor; admin: Actor }> {
  const creator = await actor()
  const admin = await actor({ organizationId: creator.user.organizationId, role: 'admin' })
  return { creator, admin }
}

const create = (who: Actor, payload: unknown) =>
  asUser(t.app, who.session, { method: 'POST', url: '/api/purchase-requests', payload: payload as object })

const get = (who: Actor, id: string) =>
  asUser(t.app, who.session, { method: 'GET', url: `/api/purchase-requests/${id}` })

const history = (who: Actor, id: string) =>
  asUser(t.app, who.session, { method: 'GET', url: `/api/purchase-requests/${id}/history` })

const move = (who: Actor, id: string, action: 'submit' | 'approve') =>
  asUser(t.app, who.session, { method: 'POST', url: `/api/purchase-requests/${id}/${action}` })

async function created(who: Actor, title = `Laptops ${randomUUID().slice(0, 8)}`): Promise<string> {
  const res = await create(who, { title })
  expect(res.statusCode).toBe(201)
  expect(res.headers.location).toBe(`/api/purchase-requests/${res.json().id}`)
  return res.json().id
}

async function submitted(who: Actor): Promise<string> {
  const id = await created(who)
  expect((await move(who, id, 'submit')).statusCode).toBe(200)
  return id
}

const storedStatus = async (id: string) =>
  (
    await t.app.db
      .selectFrom('purchase_requests')
      .select('status')
      .where('id', '=', id)
      .executeTakeFirstOrThrow()
  ).status

const auditRows = (id: string) =>
  t.app.db
    .selectFrom('purchase_request_events')
    .selectAll()
    .where('purchase_request_id', '=', id)
    .orderBy('id')
    .execute()

const requestsOf = (organizationId: string) =>
  t.app.db.selectFrom('purchase_requests').selectAll().where('organization_id', '=', organizationId).execute()

/** Delivers the mail outbox, then the approval emails the SMTP server accepted for the address. */
async function approvalMailsTo(email: string) {
  await deliverMail(t)
  return (await mailsTo(t.smtp, email)).filter((mail) =>
    mail.subject?.startsWith('Purchase request approved'),
  )
}

describe('creating a purchase request', () => {
  it("creates a DRAFT in the caller's organization, owned by the caller, with a 36-character UUID", async () => {
    const { creator } = await organization()
    const now = t.clock.now().toISOString()

    const res = await create(creator, { title: 'New laptops for the design team' })

    expect(res.statusCode).toBe(201)
    const body = res.json()
    expect(body).toEqual({
      id: expect.stringMatching(UUID),
      organizationId: creator.user.organizationId,
      createdBy: creator.user.id,
      title: 'New laptops for the design team',
      status: 'DRAFT',
      createdAt: now,
      updatedAt: now,
    })
    expect(body.id).toHaveLength(36)
    const stored = await t.app.db
      .selectFrom('purchase_requests')
      .selectAll()
      .where('id', '=', body.id)
      .executeTakeFirstOrThrow()
    expect(stored.id).toHaveLength(36)
    expect(await auditRows(body.id)).toEqual([])
  })

  it('writes the ownership tuple at once, so the creator can read the request immediately', async () => {
    const { creator } = await organization()
    const res = await create(creator, { title: 'Standing desks' })
    expect(res.statusCode).toBe(201)

    // No outbox run in between: creating delivered the tuple itself.
    const read = await get(creator, res.json().id)
    expect(read.statusCode).toBe(200)
    expect(read.json()).toEqual(res.json())
    expect(await t.app.authz.outbox.pending()).toBe(0)
    expect(
      await t.app.authz.port.check({
        user: `organization:${creator.user.organizationId}`,
        relation: 'owner_organization',
        object: `purchase_request:${res.json().id}`,
      }),
    ).toBe(true)
  })

  it('counts characters, not UTF-16 units: 255 emoji are a valid title', async () => {
    const { creator } = await organization()
    const res = await create(creator, { title: '📦'.repeat(255) })
    expect(res.statusCode).toBe(201)
  })

  it('refuses control characters, a NUL among them, with 400 and never 500', async () => {
    const { creator } = await organization()
    for (const title of ['\u0000abc', 'line\nbreak', 'tab\there']) {
      expectProblem(await create(creator, { title }), 400, 'VALIDATION_FAILED')
    }
  })

  it('accepts a title of 255 characters', async () => {
    const { creator } = await organization()
    const title = 'a'.repeat(255)
    const res = await create(creator, { title })
    expect(res.statusCode).toBe(201)
    expect(res.json().title).toBe(title)
  })

  it.each([
    ['a missing title', {}],
    ['an empty title', { title: '' }],
    ['a whitespace-only title', { title: '  \t  ' }],
    ['a title of 256 characters', { title: 'a'.repeat(256) }],
  ])('rejects %s with 400 VALIDATION_FAILED and creates nothing', async (_case, payload) => {
    const { creator } = await organization()

    const res = await create(creator, payload)

    expectProblem(res, 400, 'VALIDATION_FAILED')
    expect(res.json().errors).toEqual([expect.objectContaining({ path: expect.stringContaining('title') })])
    expect(await requestsOf(creator.user.organizationId)).toEqual([])
    const list = await asUser(t.app, creator.session, { method: 'GET', url: '/api/purchase-requests' })
    expect(list.json()).toEqual({ items: [], nextCursor: null })
  })
})

describe('the workflow DRAFT -submit-> SUBMITTED -approve-> APPROVED', () => {
  it('submits a DRAFT: SUBMITTED with one audit row', async () => {
    const { creator } = await organization()
    const id = await created(creator)
    t.clock.advanceSeconds(60)

    const res = await move(creator, id, 'submit')

    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id, status: 'SUBMITTED', updatedAt: t.clock.now().toISOString() })
    expect(await storedStatus(id)).toBe('SUBMITTED')
    expect(await auditRows(id)).toEqual([
      expect.objectContaining({
        action: 'submit',
        from_status: 'DRAFT',
        to_status: 'SUBMITTED',
        actor_id: creator.user.id,
      }),
    ])
  })

  it('approves a SUBMITTED request: APPROVED, one audit row and one approval email to the creator over SMTP', async () => {
    const { creator, admin } = await organization()
    const title = `Conference tickets ${randomUUID().slice(0, 8)}`
    const id = await created(creator, title)
    expect((await move(creator, id, 'submit')).statusCode).toBe(200)

    const res = await move(admin, id, 'approve')

    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id, status: 'APPROVED', createdBy: creator.user.id })
    expect(await storedStatus(id)).toBe('APPROVED')
    const approvals = (await auditRows(id)).filter((row) => row.action === 'approve')
    expect(approvals).toEqual([
      expect.objectContaining({ from_status: 'SUBMITTED', to_status: 'APPROVED', actor_id: admin.user.id }),
    ])

    const mails = await approvalMailsTo(creator.user.email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.subject).toBe(`Purchase request approved: ${title}`)
    expect(mails[0]?.text).toContain(title)
    // The email links to the request in the frontend (platform.web.frontend-url).
    expect(mails[0]?.text).toContain(`${FRONTEND_URL}/purchase-requests/${id}`)
    expect(mails[0]?.html).toContain(`href="${FRONTEND_URL}/purchase-requests/${id}"`)
    expect(await approvalMailsTo(admin.user.email)).toEqual([])
  })

  it('answers approve on a DRAFT with 409 INVALID_TRANSITION and changes nothing: status, audit rows, no email', async () => {
    const { creator, admin } = await organization()
    const id = await created(creator)
    const before = (await get(creator, id)).json()
    t.clock.advanceSeconds(60)

    const res = await move(admin, id, 'approve')

    expectProblem(res, 409, 'INVALID_TRANSITION')
    expect((await get(creator, id)).json()).toEqual(before)
    expect(await storedStatus(id)).toBe('DRAFT')
    expect(await auditRows(id)).toEqual([])
    expect(await approvalMailsTo(creator.user.email)).toEqual([])
  })

  it('answers submit and approve on an APPROVED request with 409 INVALID_TRANSITION and changes nothing', async () => {
    const { creator, admin } = await organization()
    const id = await submitted(creator)
    expect((await move(admin, id, 'approve')).statusCode).toBe(200)
    const before = (await get(creator, id)).json()
    t.clock.advanceSeconds(60)

    expectProblem(await move(creator, id, 'submit'), 409, 'INVALID_TRANSITION')
    expectProblem(await move(admin, id, 'submit'), 409, 'INVALID_TRANSITION')
    const again = await move(admin, id, 'approve')
    expectProblem(again, 409, 'INVALID_TRANSITION')
    expect(again.json().detail).toBe('An APPROVED purchase request cannot be approved')

    expect((await get(creator, id)).json()).toEqual(before)
    expect((await auditRows(id)).map((row) => row.action)).toEqual(['submit', 'approve'])
    expect(await approvalMailsTo(creator.user.email)).toHaveLength(1)
  })

  it('answers submit on a SUBMITTED request with 409 INVALID_TRANSITION', async () => {
    const { creator } = await organization()
    const id = await submitted(creator)

    expectProblem(await move(creator, id, 'submit'), 409, 'INVALID_TRANSITION')

    expect(await storedStatus(id)).toBe('SUBMITTED')
    expect(await auditRows(id)).toHaveLength(1)
  })

  it('lists the audit rows oldest first with action, statuses, actor and time', async () => {
    const { creator, admin } = await organization()
    const id = await created(creator)
    expect((await history(creator, id)).json()).toEqual({ items: [] })

    t.clock.advanceSeconds(30)
    const submittedAt = t.clock.now().toISOString()
    expect((await move(creator, id, 'submit')).statusCode).toBe(200)
    t.clock.advanceSeconds(90)
    const approvedAt = t.clock.now().toISOString()
    expect((await move(admin, id, 'approve')).statusCode).toBe(200)

    const res = await history(creator, id)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      items: [
        {
          action: 'submit',
          fromStatus: 'DRAFT',
          toStatus: 'SUBMITTED',
          actorId: creator.user.id,
          occurredAt: submittedAt,
        },
        {
          action: 'approve',
          fromStatus: 'SUBMITTED',
          toStatus: 'APPROVED',
          actorId: admin.user.id,
          occurredAt: approvedAt,
        },
      ],
    })
    // An organization member who took no part reads the same history.
    const colleague = await actor({ organizationId: creator.user.organizationId })
    expect((await history(colleague, id)).json()).toEqual(res.json())
  })
})

describe('who may move a request', () => {
  it("refuses a member's submit of another member's request with 403 ACCESS_DENIED; an admin may submit it", async () => {
    const { creator, admin } = await organization()
    const colleague = await actor({ organizationId: creator.user.organizationId })
    const id = await created(creator)
    expect((await get(colleague, id)).statusCode).toBe(200)

    expectProblem(await move(colleague, id, 'submit'), 403, 'ACCESS_DENIED')
    expect(await storedStatus(id)).toBe('DRAFT')
    expect(await auditRows(id)).toEqual([])

    const res = await move(admin, id, 'submit')
    expect(res.statusCode).toBe(200)
    expect(res.json().status).toBe('SUBMITTED')
    expect(await auditRows(id)).toEqual([
      expect.objectContaining({ action: 'submit', actor_id: admin.user.id }),
    ])
  })

  it('refuses approval by a member, even the creator, with 403 ACCESS_DENIED', async () => {
    const { creator } = await organization()
    const colleague = await actor({ organizationId: creator.user.organizationId })
    const id = await submitted(creator)

    expectProblem(await move(creator, id, 'approve'), 403, 'ACCESS_DENIED')
    expectProblem(await move(colleague, id, 'approve'), 403, 'ACCESS_DENIED')

    expect(await storedStatus(id)).toBe('SUBMITTED')
    expect((await auditRows(id)).map((row) => row.action)).toEqual(['submit'])
    expect(await approvalMailsTo(creator.user.email)).toEqual([])
  })
})

describe('addressing a request', () => {
  const routes = (id: string): [string, (who: Actor) => Promise<LightMyRequestResponse>][] => [
    ['GET', (who) => get(who, id)],
    ['GET history', (who) => history(who, id)],
    ['POST submit', (who) => move(who, id, 'submit')],
    ['POST approve', (who) => move(who, id, 'approve')],
  ]

  it('answers an unknown id with 404 NOT_FOUND on every route', async () => {
    const { admin } = await organization()
    for (const [route, call] of routes(randomUUID())) {
      const res = await call(admin)
      expect(res.statusCode, route).toBe(404)
      expectProblem(res, 404, 'NOT_FOUND')
    }
  })

  it('answers an id that is not a UUID with 400 VALIDATION_FAILED on every route', async () => {
    const { admin } = await organization()
    for (const bad of ['not-a-uuid', '12345', `${randomUUID()}x`]) {
      for (const [route, call] of routes(bad)) {
        const res = await call(admin)
        expect(res.statusCode, `${route} ${bad}`).toBe(400)
        expectProblem(res, 400, 'VALIDATION_FAILED')
      }
    }
  })
})

describe('two approvals of one request at once', () => {
  it('lets exactly one win: one 200, one 409 INVALID_TRANSITION, one audit row, one email', async () => {
    const { creator, admin } = await organization()
    const otherAdmin = await actor({ organizationId: creator.user.organizationId, role: 'admin' })
    const title = `Server rack ${randomUUID().slice(0, 8)}`
    const id = await created(creator, title)
    expect((await move(creator, id, 'submit')).statusCode).toBe(200)

    // Both approvals read the SUBMITTED request before either may write.
    const gate = { object: `purchase_request:${id}`, expected: 2, waiting: [] as (() => void)[] }
    port.gate = gate
    let responses: LightMyRequestResponse[]
    try {
      responses = await Promise.all([move(admin, id, 'approve'), move(otherAdmin, id, 'approve')])
    } finally {
      port.gate = undefined
    }
    expect(gate.waiting).toHaveLength(2)

    const statuses = responses.map((res) => res.statusCode).sort()
    expect(statuses).toEqual([200, 409])
    const loser = responses.find((res) => res.statusCode === 409)
    if (!loser) throw new Error('no losing approval')
    expectProblem(loser, 409, 'INVALID_TRANSITION')
    const winner = responses.find((res) => res.statusCode === 200)
    expect(winner?.json().status).toBe('APPROVED')

    expect(await storedStatus(id)).toBe('APPROVED')
    const approvals = (await auditRows(id)).filter((row) => row.action === 'approve')
    expect(approvals).toHaveLength(1)
    const winnerId = responses[0] === winner ? admin.user.id : otherAdmin.user.id
    expect(approvals[0]?.actor_id).toBe(winnerId)

    const queued = await t.app.db
      .selectFrom('mail_outbox')
      .select('id')
      .where('template', '=', 'purchase_request_approved')
      .where('recipient', '=', creator.user.email)
      .execute()
    expect(queued).toHaveLength(1)
    const mails = await approvalMailsTo(creator.user.email)
    expect(mails.map((mail) => mail.subject)).toEqual([`Purchase request approved: ${title}`])
  })
})
