import type { LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import { Webhook as StandardWebhook } from 'standardwebhooks'
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest'
import { inTransaction } from '../src/db/database.ts'
import {
  ACCOUNT_TEST_CONFIG,
  type Actor,
  asUser,
  expectProblem,
  newActor,
  signIn,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { TestClock } from './helpers/clock.ts'
import { newDeliveredApiKey } from './helpers/machines.ts'
import { WebhookReceiver } from './helpers/webhook-receiver.ts'

// Webhooks as a partner receives them: every delivery verified with the `standardwebhooks`
// package (the reference implementation of the signature scheme) by a real HTTP server; retries
// with one webhook-id; 410 and persistent failure disabling the endpoint; private and metadata
// addresses refused unless the development flag allows them; rotation signing with both secrets.

const ORIGIN = { remoteAddress: '203.0.113.9', headers: { 'user-agent': 'webhooks-test/1.0' } }

let t: TestApp
let receiver: WebhookReceiver
let admin: Actor

beforeAll(async () => {
  receiver = await WebhookReceiver.start()
  // Near real time: the receiver's library refuses timestamps more than five minutes off its clock.
  t = await createTestApp({
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      'platform.webhooks.allow-private-networks': 'true',
      'platform.webhooks.timeout': '2s',
      'platform.webhooks.disable-after-failures': '3',
      'platform.webhooks.disable-after': '1s',
    },
  })
  admin = await newActor(t.app, { role: 'admin' })
})

afterAll(async () => {
  await t?.close()
  await receiver?.close()
})

const as = (actor: Actor, options: Parameters<typeof asUser>[2]) =>
  asUser(t.app, actor.session, { ...ORIGIN, ...options })

async function createWebhook(
  actor: Actor,
  body: Record<string, unknown>,
): Promise<{ id: string; secret: string; res: LightMyRequestResponse }> {
  const res = await as(actor, { method: 'POST', url: '/api/webhooks', payload: body })
  expect(res.statusCode, res.body).toBe(201)
  return { id: res.json().id, secret: res.json().secret, res }
}

/** Changes a configuration entry of the actor's organization: one organization_config.changed event. */
function changeConfig(actor: Actor, key: string, value = 'on') {
  return as(actor, {
    method: 'PUT',
    url: `/api/organizations/${actor.user.organizationId}/config/${key}`,
    payload: { value },
  })
}

/** Delivers what is queued once the events so far are chained (their messages are queued then). */
const deliver = async () => {
  await t.app.services.auditChainer.drain()
  return t.app.services.webhookWorker.runOnce()
}

const attemptsOf = async (actor: Actor, id: string) => {
  const res = await as(actor, { method: 'GET', url: `/api/webhooks/${id}/deliveries` })
  expect(res.statusCode).toBe(200)
  return res.json().items as Array<Record<string, unknown>>
}

const verify = (secret: string, request: { headers: Record<string, unknown>; body: string }) =>
  new StandardWebhook(secret).verify(request.body, request.headers as Record<string, string>)

describe('managing endpoints', () => {
  it('creates an endpoint with a secret shown once, lists, reads, updates and deletes it, each an audit event', async () => {
    const { id, secret, res } = await createWebhook(admin, {
      url: `${receiver.url}/crud`,
      eventTypes: ['api_key.revoked', 'api_key.revoked', 'user.invited'],
      description: 'CRM sync',
    })
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    expect(res.headers.location).toBe(`/api/webhooks/${id}`)
    expect(res.json()).toMatchObject({ eventTypes: ['api_key.revoked', 'user.invited'], enabled: true })
    // Sealed at rest.
    const stored = await t.app.db
      .selectFrom('webhook_endpoints')
      .select('secret')
      .where('id', '=', id)
      .executeTakeFirstOrThrow()
    expect(stored.secret).not.toContain(secret.slice(6, 20))

    const list = await as(admin, { method: 'GET', url: '/api/webhooks' })
    expect(list.json().items.map((w: { id: string }) => w.id)).toContain(id)
    expect(list.body).not.toContain(secret)
    const one = await as(admin, { method: 'GET', url: `/api/webhooks/${id}` })
    expect(one.json()).not.toHaveProperty('secret')

    const updated = await as(admin, {
      method: 'PATCH',
      url: `/api/webhooks/${id}`,
      payload: { enabled: false, description: 'paused' },
    })
    expect(updated.json()).toMatchObject({ enabled: false, description: 'paused', disabledReason: null })

    const removed = await as(admin, { method: 'DELETE', url: `/api/webhooks/${id}` })
    expect(removed.statusCode).toBe(204)
    expectProblem(await as(admin, { method: 'GET', url: `/api/webhooks/${id}` }), 404, 'NOT_FOUND')

    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'actor_id', 'ip_address', 'data'])
      .where('subject_id', '=', id)
      .orderBy('sequence')
      .execute()
    expect(events.map((e) => e.type)).toEqual(['webhook.created', 'webhook.updated', 'webhook.deleted'])
    expect(events.every((e) => e.actor_id === admin.user.id && e.ip_address === ORIGIN.remoteAddress)).toBe(
      true,
    )
    expect(events[1]?.data).toEqual({ fields: 'description,enabled', enabled: false })
  })

  it('is for admins and webhooks:write keys only, and never shows another organization’s endpoint', async () => {
    const member = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'member' })
    expectProblem(await as(member, { method: 'GET', url: '/api/webhooks' }), 403, 'ACCESS_DENIED')
    expectProblem(
      await as(member, {
        method: 'POST',
        url: '/api/webhooks',
        payload: { url: `${receiver.url}/x`, eventTypes: ['*'] },
      }),
      403,
      'ACCESS_DENIED',
    )

    const key = await newDeliveredApiKey(t.app, admin.user.organizationId, ['webhooks:write'])
    const byKey = await t.app.inject({
      method: 'POST',
      url: '/api/webhooks',
      headers: key.headers,
      payload: { url: `${receiver.url}/by-key`, eventTypes: ['*'] },
    })
    expect(byKey.statusCode).toBe(201)
    const readOnly = await newDeliveredApiKey(t.app, admin.user.organizationId, ['audit:read'])
    expectProblem(
      await t.app.inject({ method: 'GET', url: '/api/webhooks', headers: readOnly.headers }),
      403,
      'INSUFFICIENT_SCOPE',
    )

    const other = await newActor(t.app, { role: 'admin' })
    expectProblem(
      await as(other, { method: 'GET', url: `/api/webhooks/${byKey.json().id}` }),
      404,
      'NOT_FOUND',
    )
    expectProblem(
      await as(other, { method: 'DELETE', url: `/api/webhooks/${byKey.json().id}` }),
      404,
      'NOT_FOUND',
    )
    expect((await as(other, { method: 'GET', url: '/api/webhooks' })).json().items).toEqual([])
  })

  it('refuses an unusable URL or event type with 400 VALIDATION_FAILED', async () => {
    for (const body of [
      { url: 'not a url', eventTypes: ['*'] },
      { url: 'ftp://hooks.example.com/', eventTypes: ['*'] },
      { url: 'https://user:pass@hooks.example.com/', eventTypes: ['*'] },
      { url: 'https://hooks.example.com/', eventTypes: [] },
      { url: 'https://hooks.example.com/', eventTypes: ['Sign In'] },
    ]) {
      expectProblem(
        await as(admin, { method: 'POST', url: '/api/webhooks', payload: body }),
        400,
        'VALIDATION_FAILED',
      )
    }
  })

  it('keeps an organization to 20 endpoints', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    for (let i = 0; i < 20; i++)
      await createWebhook(owner, { url: `${receiver.url}/n${i}`, eventTypes: ['*'] })
    expectProblem(
      await as(owner, {
        method: 'POST',
        url: '/api/webhooks',
        payload: { url: `${receiver.url}/n20`, eventTypes: ['*'] },
      }),
      409,
      'WEBHOOK_LIMIT_REACHED',
    )
  })
})

describe('deliveries', () => {
  // Each test starts at real time: the receiver's library compares the timestamp with its own clock.
  beforeEach(() => t.clock.advance(Date.now() - t.clock.now().getTime()))

  it('delivers an event signed as Standard Webhooks: the receiver’s library verifies it, and refuses a tampered body', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { secret } = await createWebhook(owner, {
      url: `${receiver.url}/signed`,
      eventTypes: ['organization_config.changed'],
    })
    const res = await changeConfig(owner, 'feature.x')
    expect(res.statusCode).toBe(200)
    await deliver()
    const [request] = receiver.to('/signed')
    expect(request).toBeDefined()
    const payload = verify(secret, request as { headers: Record<string, unknown>; body: string }) as {
      type: string
      timestamp: string
      data: Record<string, unknown>
    }
    expect(payload.type).toBe('organization_config.changed')
    const event = await t.app.db
      .selectFrom('audit_events')
      .selectAll()
      .where('type', '=', 'organization_config.changed')
      .where('organization_id', '=', owner.user.organizationId)
      .executeTakeFirstOrThrow()
    expect(payload.data).toMatchObject({
      id: event.id,
      sequence: Number(event.sequence),
      hash: event.hash,
      actor: { type: 'user', id: owner.user.id },
      ipAddress: ORIGIN.remoteAddress,
      requestId: res.headers['x-request-id'],
      data: { key: 'feature.x' },
    })
    expect(request?.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/)
    expect(request?.headers['content-type']).toBe('application/json')

    const tampered = { ...(request as { headers: Record<string, unknown>; body: string }) }
    tampered.body = tampered.body.replace('feature.x', 'feature.y')
    expect(() => verify(secret, tampered)).toThrow()
    // Another secret does not verify it.
    const { secret: another } = await createWebhook(owner, {
      url: `${receiver.url}/other`,
      eventTypes: ['user.invited'],
    })
    expect(() => verify(another, request as never)).toThrow()
  })

  it('sends only the types an endpoint subscribes to (or every type with *), and nothing for a rolled-back change', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    await createWebhook(owner, { url: `${receiver.url}/only-revoked`, eventTypes: ['api_key.revoked'] })
    await createWebhook(owner, { url: `${receiver.url}/everything`, eventTypes: ['*'] })
    await changeConfig(owner, 'feature.subscribed')
    await deliver()
    expect(receiver.to('/only-revoked')).toHaveLength(0)
    expect(receiver.to('/everything').map((r) => JSON.parse(r.body).type)).toContain(
      'organization_config.changed',
    )

    const before = await t.app.db
      .selectFrom('webhook_outbox')
      .select('id')
      .where('organization_id', '=', owner.user.organizationId)
      .execute()
    await expect(
      inTransaction(t.app.db, async (trx) => {
        await t.app.services.audit.record(trx, {
          type: 'organization_config.changed',
          organizationId: owner.user.organizationId,
          actor: { type: 'system', id: null },
          data: { key: 'rolled.back' },
        })
        throw new Error('roll back')
      }),
    ).rejects.toThrow('roll back')
    const after = await t.app.db
      .selectFrom('webhook_outbox')
      .select('id')
      .where('organization_id', '=', owner.user.organizationId)
      .execute()
    expect(after).toHaveLength(before.length)
  })

  it('delivers to an endpoint with no audit position (made by the previous release) each event written after it, once', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    await deliver()
    // Nothing is chained until the test says so: the chainer neither sweeps nor hears nudges.
    const chainer = t.app.services.auditChainer
    await chainer.stop()
    onTestFinished(() => chainer.start())
    // Written before the endpoint exists, chained after it does: not for it.
    await changeConfig(owner, 'feature.before')
    t.clock.advanceSeconds(1)
    const { id } = await createWebhook(owner, { url: `${receiver.url}/previous-release`, eventTypes: ['*'] })
    // The previous release inserts endpoints without a position.
    await sql`update webhook_endpoints set audit_position = null where id = ${id}`.execute(t.app.db)
    t.clock.advanceSeconds(1)
    await changeConfig(owner, 'feature.after.1')
    await changeConfig(owner, 'feature.after.2')
    await deliver()
    // Chaining and delivering again sends nothing twice.
    await deliver()
    const requests = receiver.to('/previous-release')
    const bodies = requests.map(
      (r) => JSON.parse(r.body) as { type: string; data: { data: { key: string } } },
    )
    // Its own creation is not among them either.
    expect(bodies.map((b) => `${b.type} ${b.data.data.key}`).sort()).toEqual([
      'organization_config.changed feature.after.1',
      'organization_config.changed feature.after.2',
    ])
    expect(new Set(requests.map((r) => r.headers['webhook-id'])).size).toBe(2)
  })

  it('retries a failing delivery with back-off under one webhook-id: 500, 500, 200 are three attempts', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id, secret } = await createWebhook(owner, { url: `${receiver.url}/retried`, eventTypes: ['*'] })
    receiver.answer(500, 500, 200)
    await changeConfig(owner, 'feature.retried')
    const sent = () => receiver.to('/retried').length
    await deliver()
    expect(sent()).toBe(1)
    // Not due yet: the back-off holds it.
    await deliver()
    expect(sent()).toBe(1)
    t.clock.advanceSeconds(40)
    await deliver()
    expect(sent()).toBe(2)
    t.clock.advanceSeconds(150)
    await deliver()
    expect(sent()).toBe(3)
    t.clock.advanceSeconds(300)
    await deliver()
    expect(sent()).toBe(3)

    const requests = receiver.to('/retried')
    expect(requests).toHaveLength(3)
    expect(new Set(requests.map((r) => r.headers['webhook-id'])).size).toBe(1)
    expect(new Set(requests.map((r) => r.body)).size).toBe(1)
    // Each attempt signed afresh with its own timestamp.
    expect(new Set(requests.map((r) => r.headers['webhook-timestamp'])).size).toBe(3)
    expect(verify(secret, requests[2] as never)).toBeTruthy()

    const attempts = await attemptsOf(owner, id)
    expect(attempts.map((a) => [a.attempt, a.statusCode, a.outcome])).toEqual([
      [3, 200, 'delivered'],
      [2, 500, 'retrying'],
      [1, 500, 'retrying'],
    ])
    expect(attempts[1]?.error).toBe('HTTP 500')
  })

  it('follows no redirect: a 302 is a failed attempt and the Location is never called', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id } = await createWebhook(owner, { url: `${receiver.url}/redirecting`, eventTypes: ['*'] })
    receiver.answer(302)
    await changeConfig(owner, 'feature.redirected')
    await deliver()
    expect(receiver.to('/elsewhere')).toHaveLength(0)
    const [attempt] = await attemptsOf(owner, id)
    expect(attempt).toMatchObject({
      statusCode: 302,
      outcome: 'retrying',
      error: 'redirect (302) not followed',
    })
  })

  it('gives up on a receiver that does not answer within the timeout, and tries again later', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id } = await createWebhook(owner, { url: `${receiver.url}/hanging`, eventTypes: ['*'] })
    receiver.hang()
    try {
      await changeConfig(owner, 'feature.hanging')
      await deliver()
    } finally {
      receiver.hang(false)
    }
    const [attempt] = await attemptsOf(owner, id)
    expect(attempt).toMatchObject({ statusCode: null, outcome: 'retrying', error: 'timed out' })
  })

  it('disables an endpoint that answers 410, tells the admins, and queues nothing more for it', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id } = await createWebhook(owner, {
      url: `${receiver.url}/gone?token=s3cret`,
      eventTypes: ['organization_config.changed'],
    })
    receiver.answer(410)
    await changeConfig(owner, 'feature.gone')
    await deliver()
    const endpoint = (await as(owner, { method: 'GET', url: `/api/webhooks/${id}` })).json()
    expect(endpoint).toMatchObject({ enabled: false, disabledReason: 'gone' })
    const [attempt] = await attemptsOf(owner, id)
    expect(attempt).toMatchObject({ statusCode: 410, outcome: 'endpoint_disabled' })

    const notices = await t.app.db
      .selectFrom('mail_outbox')
      .select(['recipient', 'data'])
      .where('template', '=', 'webhook_disabled')
      .where('organization_id', '=', owner.user.organizationId)
      .execute()
    expect(notices.map((n) => n.recipient)).toEqual([owner.user.email])
    expect(notices[0]?.data).toEqual({ url: receiver.url, webhookId: id, reason: 'gone' })
    expect(JSON.stringify(notices)).not.toContain('s3cret')
    const disabled = await t.app.db
      .selectFrom('audit_events')
      .select(['actor_type', 'data'])
      .where('type', '=', 'webhook.disabled')
      .where('subject_id', '=', id)
      .execute()
    expect(disabled).toEqual([{ actor_type: 'system', data: { reason: 'gone' } }])

    const before = receiver.to('/gone?token=s3cret').length
    await changeConfig(owner, 'feature.after-gone')
    t.clock.advanceSeconds(60)
    await deliver()
    expect(receiver.to('/gone?token=s3cret')).toHaveLength(before)

    // Enabled again by an admin: delivered to once more, with a clean record.
    const enabled = await as(owner, {
      method: 'PATCH',
      url: `/api/webhooks/${id}`,
      payload: { enabled: true },
    })
    expect(enabled.json()).toMatchObject({ enabled: true, disabledReason: null })
    await changeConfig(owner, 'feature.back')
    await deliver()
    expect(receiver.to('/gone?token=s3cret')).toHaveLength(before + 1)
  })

  it('disables an endpoint after consecutive failures over the configured time, and a success in between resets the count', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id } = await createWebhook(owner, { url: `${receiver.url}/failing`, eventTypes: ['*'] })
    const state = async () => (await as(owner, { method: 'GET', url: `/api/webhooks/${id}` })).json()
    // One message due at a time, so the order of outcomes is the order of attempts.
    receiver.answer(500, 200)
    await changeConfig(owner, 'feature.x')
    await deliver()
    t.clock.advanceSeconds(40)
    await deliver()
    // Failed, then delivered: the count starts again.
    receiver.answer(500, 500, 500)
    await changeConfig(owner, 'feature.y')
    await deliver()
    t.clock.advanceSeconds(40)
    await deliver()
    expect(await state()).toMatchObject({ enabled: true, disabledReason: null })
    t.clock.advanceSeconds(150)
    await deliver()
    expect(await state()).toMatchObject({ enabled: false, disabledReason: 'failing' })
    const outcomes = (await attemptsOf(owner, id)).map((a) => a.outcome)
    expect(outcomes).toContain('endpoint_disabled')
  })

  it('sends a test ping on request, once, and lists it among the deliveries', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id, secret } = await createWebhook(owner, {
      url: `${receiver.url}/ping`,
      eventTypes: ['api_key.revoked'],
    })
    const res = await as(owner, { method: 'POST', url: `/api/webhooks/${id}/test` })
    expect(res.statusCode).toBe(202)
    await deliver()
    const [ping] = receiver.to('/ping')
    expect(ping?.headers['webhook-id']).toBe(res.json().messageId)
    expect(verify(secret, ping as never)).toMatchObject({ type: 'webhook.test', data: { webhookId: id } })
    expect((await attemptsOf(owner, id)).map((a) => a.eventType)).toEqual(['webhook.test'])
  })

  it('signs with both secrets for a day after a rotation, each signature verifying with its own secret', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id, secret: first } = await createWebhook(owner, {
      url: `${receiver.url}/rotated`,
      eventTypes: ['*'],
    })
    const rotated = await as(owner, { method: 'POST', url: `/api/webhooks/${id}/rotate-secret` })
    expect(rotated.statusCode).toBe(200)
    const second = rotated.json().secret as string
    expect(second).not.toBe(first)
    expect(rotated.json().previousSecretExpiresAt).toBeTruthy()
    await changeConfig(owner, 'feature.rotated')
    await deliver()
    const [request] = receiver.to('/rotated')
    const signatures = String(request?.headers['webhook-signature']).split(' ')
    expect(signatures).toHaveLength(2)
    const withOnly = (signature: string) => ({
      body: request?.body as string,
      headers: { ...request?.headers, 'webhook-signature': signature },
    })
    expect(verify(second, withOnly(signatures[0] as string))).toBeTruthy()
    expect(verify(first, withOnly(signatures[1] as string))).toBeTruthy()
    expect(() => verify(first, withOnly(signatures[0] as string))).toThrow()
    const rotation = await t.app.db
      .selectFrom('audit_events')
      .select(['actor_id', 'ip_address', 'request_id'])
      .where('type', '=', 'webhook.secret_rotated')
      .where('subject_id', '=', id)
      .execute()
    expect(rotation).toEqual([
      {
        actor_id: owner.user.id,
        ip_address: ORIGIN.remoteAddress,
        request_id: rotated.headers['x-request-id'],
      },
    ])

    // A day later only the new secret signs.
    t.clock.advanceSeconds(24 * 3600 + 1)
    const again = { ...owner, session: await signIn(t.app, owner.user) }
    expect((await as(again, { method: 'POST', url: `/api/webhooks/${id}/test` })).statusCode).toBe(202)
    await deliver()
    const later = receiver.to('/rotated').at(-1)
    expect(String(later?.headers['webhook-signature']).split(' ')).toHaveLength(1)
  })

  it('signs with a timestamp the receiver refuses when the sender’s clock is ten minutes behind (a replay)', async () => {
    t.clock.advanceSeconds(-600)
    const owner = await newActor(t.app, { role: 'admin' })
    const { secret } = await createWebhook(owner, { url: `${receiver.url}/stale`, eventTypes: ['*'] })
    await changeConfig(owner, 'feature.stale')
    await deliver()
    const [request] = receiver.to('/stale')
    expect(() => verify(secret, request as never)).toThrow(/timestamp/i)
  })
})

describe('retention', () => {
  it('removes delivered messages and their attempts after platform.retention.webhook-deliveries, and keeps what is still due', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const { id } = await createWebhook(owner, {
      url: `${receiver.url}/kept`,
      eventTypes: ['organization_config.changed'],
    })
    await changeConfig(owner, 'feature.delivered')
    await deliver()
    receiver.answer(500)
    await changeConfig(owner, 'feature.pending')
    await deliver()
    const rows = () =>
      t.app.db.selectFrom('webhook_outbox').select(['delivered_at']).where('endpoint_id', '=', id).execute()
    expect(await rows()).toHaveLength(2)
    t.clock.advanceSeconds(30 * 24 * 3600 + 1)
    await t.app.housekeeping.runOnce()
    expect((await rows()).map((r) => r.delivered_at)).toEqual([null])
    const attempts = await t.app.db
      .selectFrom('webhook_attempts')
      .select('id')
      .where('endpoint_id', '=', id)
      .execute()
    expect(attempts).toEqual([])
  })
})

describe('two instances on one database', () => {
  let other: TestApp
  beforeAll(async () => {
    other = await createTestApp({
      database: t.database,
      config: {
        ...ACCOUNT_TEST_CONFIG,
        'platform.auth.jwt.secret': t.config.auth.jwt.secret,
        'platform.webhooks.allow-private-networks': 'true',
      },
    })
  })
  afterAll(async () => other?.close())

  it('delivers each message once when both workers run at the same time', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    await createWebhook(owner, { url: `${receiver.url}/twice`, eventTypes: ['organization_config.changed'] })
    for (let i = 0; i < 25; i++) await changeConfig(owner, `feature.n${i}`)
    await t.app.services.auditChainer.drain()
    await Promise.all([deliver(), other.app.services.webhookWorker.runOnce(), deliver()])
    const ids = receiver.to('/twice').map((r) => r.headers['webhook-id'])
    expect(ids).toHaveLength(25)
    expect(new Set(ids).size).toBe(25)
  })
})

describe('private networks refused without the development flag', () => {
  let strict: TestApp
  let owner: Actor
  const answers = new Map<string, string[][]>()
  beforeAll(async () => {
    strict = await createTestApp({
      config: { ...ACCOUNT_TEST_CONFIG, 'platform.webhooks.timeout': '1s' },
      // Names the test maps to addresses, one answer per lookup in turn.
      deps: {
        webhookResolve: async (hostname) => {
          const queue = answers.get(hostname) ?? []
          const next = queue.length > 1 ? (queue.shift() as string[]) : (queue[0] ?? [])
          return next.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
        },
      },
    })
    owner = await newActor(strict.app, { role: 'admin' })
  })
  afterAll(async () => strict?.close())

  const create = (url: string) =>
    asUser(strict.app, owner.session, {
      method: 'POST',
      url: '/api/webhooks',
      payload: { url, eventTypes: ['*'] },
    })

  it('refuses http, loopback, link-local (cloud metadata), private and unique-local addresses at creation', async () => {
    for (const url of [
      `${receiver.url}/plain-http`,
      'https://127.0.0.1/hook',
      'https://169.254.169.254/latest/meta-data/',
      'https://10.0.0.8/hook',
      'https://[::1]/hook',
      'https://[fd00:ec2::254]/hook',
      'https://[::ffff:127.0.0.1]/hook',
      'https://localhost/hook',
      // 127.0.0.1 and 169.254.169.254 written as one number and in octal: URL parsing normalises them.
      'https://2130706433/hook',
      'https://0251.0376.0251.0376/hook',
    ]) {
      const res = await create(url)
      expectProblem(res, 400, 'VALIDATION_FAILED')
    }
  })

  it('refuses, at delivery, a name that resolves to 127.0.0.1 or 169.254.169.254, and one whose answer changes to such an address', async () => {
    answers.set('loopback.example.test', [['127.0.0.1']])
    answers.set('metadata.example.test', [['169.254.169.254']])
    answers.set('mixed.example.test', [['8.8.8.8', '10.1.2.3']])
    // Public when first resolved, the metadata address at the next lookup (DNS rebinding).
    answers.set('rebinding.example.test', [['1.1.1.1'], ['169.254.169.254']])
    const ids: Record<string, string> = {}
    for (const host of answers.keys()) {
      const res = await create(`https://${host}/hook`)
      expect(res.statusCode, host).toBe(201)
      ids[host] = res.json().id
    }
    await asUser(strict.app, owner.session, {
      method: 'PUT',
      url: `/api/organizations/${owner.user.organizationId}/config/feature.ssrf`,
      payload: { value: 'on' },
    })
    await strict.app.services.auditChainer.drain()
    await strict.app.services.webhookWorker.runOnce()
    strict.clock.advanceSeconds(60)
    await strict.app.services.webhookWorker.runOnce()
    const errors = async (host: string) =>
      (
        await asUser(strict.app, owner.session, {
          method: 'GET',
          url: `/api/webhooks/${ids[host]}/deliveries`,
        })
      )
        .json()
        .items.map((a: { error: string }) => a.error)
    expect(await errors('loopback.example.test')).toContain(
      'refused: loopback.example.test resolves to a refused address (127.0.0.1)',
    )
    expect(await errors('metadata.example.test')).toContain(
      'refused: metadata.example.test resolves to a refused address (169.254.169.254)',
    )
    expect(await errors('mixed.example.test')).toContain(
      'refused: mixed.example.test resolves to a refused address (10.1.2.3)',
    )
    const rebinding = await errors('rebinding.example.test')
    expect(rebinding).toHaveLength(2)
    expect(rebinding[0]).toBe(
      'refused: rebinding.example.test resolves to a refused address (169.254.169.254)',
    )
    expect(rebinding[1]).not.toMatch(/^refused/)
    // Nothing reached the receiver on this machine.
    expect(receiver.to('/hook')).toHaveLength(0)
  })
})
