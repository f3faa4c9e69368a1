import type { InjectOptions } from 'fastify'
import { beforeAll, describe, expect, it } from 'vitest'
import { ACCOUNT_TEST_CONFIG, type Actor, asUser, expectProblem, newActor } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { newApiKey } from './helpers/machines.ts'

// GET /api/outbox-status: what an organization's mail and webhook outboxes hold and their latest
// dead letters, for its admins only; never another organization's messages, never a mail's
// recipient or data.

const t = useTestApp({ config: ACCOUNT_TEST_CONFIG })

const RECIPIENT = 'someone-else@example.com'

let admin: Actor
let other: Actor

beforeAll(async () => {
  admin = await newActor(t.app, { role: 'admin' })
  other = await newActor(t.app, { role: 'admin' })
})

const as = (actor: Actor | null, options: InjectOptions) => asUser(t.app, actor?.session ?? null, options)

const minutesAgo = (minutes: number) => new Date(t.clock.now().getTime() - minutes * 60_000)

/** A mail of the organization, given up `failedMinutesAgo` minutes ago, or still waiting (null). */
async function queueMail(organizationId: string, failedMinutesAgo: number | null) {
  const now = t.clock.now()
  const row = await t.app.db
    .insertInto('mail_outbox')
    .values({
      template: 'password_reset',
      recipient: RECIPIENT,
      data: JSON.stringify({ name: 'Someone Else' }),
      organization_id: organizationId,
      created_at: now,
      next_attempt_at: now,
      ...(failedMinutesAgo === null
        ? {}
        : {
            attempts: 20,
            failed_at: minutesAgo(failedMinutesAgo),
            last_error: 'smtp: 550 mailbox unavailable',
          }),
    })
    .returning('id')
    .executeTakeFirstOrThrow()
  return row.id
}

/** A webhook message of the organization's endpoint, given up `failedMinutesAgo` minutes ago. */
async function deadWebhookMessage(actor: Actor, failedMinutesAgo: number) {
  const created = await as(actor, {
    method: 'POST',
    url: '/api/webhooks',
    payload: { url: 'https://hooks.example.com/receiver', eventTypes: ['purchase_request.approved'] },
  })
  expect(created.statusCode, created.body).toBe(201)
  const endpointId = created.json().id as string
  const now = t.clock.now()
  const row = await t.app.db
    .insertInto('webhook_outbox')
    .values({
      endpoint_id: endpointId,
      organization_id: actor.user.organizationId,
      event_type: 'purchase_request.approved',
      payload: '{}',
      created_at: now,
      next_attempt_at: now,
      attempts: 12,
      failed_at: minutesAgo(failedMinutesAgo),
      last_error: 'HTTP 500',
    })
    .returning('id')
    .executeTakeFirstOrThrow()
  return { id: row.id, endpointId }
}

describe('the organization’s outbox status', () => {
  it('shows its own counts and dead letters, newest first, and none of another organization', async () => {
    const deadMail = await queueMail(admin.user.organizationId, 10)
    await queueMail(admin.user.organizationId, null)
    const webhook = await deadWebhookMessage(admin, 5)
    const theirMail = await queueMail(other.user.organizationId, 1)
    const theirWebhook = await deadWebhookMessage(other, 2)

    const res = await as(admin, { method: 'GET', url: '/api/outbox-status' })
    expect(res.statusCode, res.body).toBe(200)
    expect(res.json()).toEqual({
      outboxes: [
        { kind: 'mail', pending: 1, deadLetters: 1 },
        { kind: 'webhook', pending: 0, deadLetters: 1 },
      ],
      deadLetters: [
        {
          kind: 'webhook',
          id: webhook.id,
          what: `purchase_request.approved to webhook ${webhook.endpointId}`,
          attempts: 12,
          failedAt: minutesAgo(5).toISOString(),
          lastError: 'HTTP 500',
        },
        {
          kind: 'mail',
          id: deadMail,
          what: 'password_reset',
          attempts: 20,
          failedAt: minutesAgo(10).toISOString(),
          lastError: 'smtp: 550 mailbox unavailable',
        },
      ],
    })
    expect(res.body).not.toContain(RECIPIENT)
    expect(res.body).not.toContain('Someone Else')
    expect(res.body).not.toContain(theirWebhook.endpointId)

    const theirs = await as(other, { method: 'GET', url: '/api/outbox-status' })
    expect(theirs.json().deadLetters.map((d: { kind: string; id: string }) => `${d.kind} ${d.id}`)).toEqual([
      `mail ${theirMail}`,
      `webhook ${theirWebhook.id}`,
    ])
  })

  it('lists at most `limit` dead letters, up to 100', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    for (const minutes of [3, 2, 1]) await queueMail(owner.user.organizationId, minutes)
    const res = await as(owner, { method: 'GET', url: '/api/outbox-status?limit=2' })
    expect(res.json().deadLetters.map((d: { failedAt: string }) => d.failedAt)).toEqual([
      minutesAgo(1).toISOString(),
      minutesAgo(2).toISOString(),
    ])
    expect(res.json().outboxes[0]).toEqual({ kind: 'mail', pending: 0, deadLetters: 3 })
    for (const limit of ['0', '101', 'all'])
      expectProblem(
        await as(owner, { method: 'GET', url: `/api/outbox-status?limit=${limit}` }),
        400,
        'VALIDATION_FAILED',
      )
  })

  it('is for the organization’s admins only', async () => {
    const member = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'member' })
    expectProblem(await as(member, { method: 'GET', url: '/api/outbox-status' }), 403, 'ACCESS_DENIED')
    const key = await newApiKey(t.app, admin.user.organizationId, ['audit:read', 'webhooks:write'])
    expectProblem(
      await t.app.inject({ method: 'GET', url: '/api/outbox-status', headers: key.headers }),
      403,
      'INSUFFICIENT_SCOPE',
    )
    expectProblem(
      await as(null, { method: 'GET', url: '/api/outbox-status' }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
  })
})
