import { randomUUID } from 'node:crypto'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import { beforeAll, describe, expect, it } from 'vitest'
import { SCOPES } from '../src/scopes.ts'
import { ACCOUNT_TEST_CONFIG, type Actor, asUser, expectProblem, newActor } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { newApiKey, serviceBearer } from './helpers/machines.ts'

// API keys managed over HTTP by an organization's admins (/api/api-keys): the raw key shown once
// and working at once with exactly its scopes, refused at once when revoked; keyset paging; users
// only (a key never manages keys); another organization's keys not found; audit events with the
// admin as actor and the request's origin.

const t = useTestApp({ config: ACCOUNT_TEST_CONFIG })

const ORIGIN = { remoteAddress: '203.0.113.21', headers: { 'user-agent': 'api-keys-test/1.0' } }

let admin: Actor

beforeAll(async () => {
  admin = await newActor(t.app, { role: 'admin' })
})

const as = (actor: Actor | null, options: InjectOptions) =>
  asUser(t.app, actor?.session ?? null, {
    ...options,
    ...ORIGIN,
    headers: { ...ORIGIN.headers, ...options.headers },
  })

async function createKey(actor: Actor, body: Record<string, unknown>) {
  const res = await as(actor, { method: 'POST', url: '/api/api-keys', payload: body })
  expect(res.statusCode, res.body).toBe(201)
  return { key: res.json() as { id: string; rawKey: string; keyPrefix: string; scopes: string[] }, res }
}

const withKey = (rawKey: string, url: string) =>
  t.app.inject({ method: 'GET', url, headers: { 'x-api-key': rawKey } })

async function eventsOf(type: string, subjectId: string) {
  return t.app.db
    .selectFrom('audit_events')
    .selectAll()
    .where('type', '=', type)
    .where('subject_id', '=', subjectId)
    .execute()
}

/** The one event of the type about the subject, from the request that answered `res`. */
async function oneEvent(type: string, subjectId: string, res: LightMyRequestResponse) {
  const events = await eventsOf(type, subjectId)
  expect(events, type).toHaveLength(1)
  const event = events[0]
  expect(event?.ip_address).toBe(ORIGIN.remoteAddress)
  expect(event?.user_agent).toBe(ORIGIN.headers['user-agent'])
  expect(event?.request_id).toBe(res.headers['x-request-id'])
  return event
}

describe('creating a key', () => {
  it('answers the raw key once; it works at once with its scope and is refused a scope it lacks', async () => {
    const { key, res } = await createKey(admin, {
      description: 'audit export',
      scopes: ['audit:read'],
    })
    expect(key).toMatchObject({
      description: 'audit export',
      scopes: ['audit:read'],
      expiresAt: null,
      revokedAt: null,
      lastUsedAt: null,
    })
    expect(key.rawKey).toMatch(/^sk_live_[A-Za-z0-9_-]{43}$/)
    expect(key.rawKey.startsWith(key.keyPrefix)).toBe(true)
    expect(res.body).not.toMatch(/hash/i)
    expect(res.headers.location).toBe(`/api/api-keys/${key.id}`)
    const one = await as(admin, { method: 'GET', url: `/api/api-keys/${key.id}` })
    expect(one.statusCode).toBe(200)
    expect(one.json()).toEqual({ ...key, rawKey: undefined, createdAt: expect.any(String) })

    const allowed = await withKey(key.rawKey, '/api/audit-events')
    expect(allowed.statusCode, allowed.body).toBe(200)
    // Its own creation is in the organization's trail, which it may read.
    expect(allowed.json().items.map((e: { subject: { id: string } | null }) => e.subject?.id)).toContain(
      key.id,
    )
    expectProblem(await withKey(key.rawKey, '/api/webhooks'), 403, 'INSUFFICIENT_SCOPE')

    const listed = await as(admin, { method: 'GET', url: '/api/api-keys' })
    expect(listed.statusCode).toBe(200)
    expect(listed.body).not.toContain(key.rawKey)
    expect(listed.json().items.find((k: { id: string }) => k.id === key.id)).toEqual({
      id: key.id,
      keyPrefix: key.keyPrefix,
      description: 'audit export',
      scopes: ['audit:read'],
      createdAt: expect.any(String),
      expiresAt: null,
      revokedAt: null,
      lastUsedAt: null,
    })
  })

  it('records api_key.created with the admin as actor and the request’s origin', async () => {
    const expiresAt = new Date(t.clock.now().getTime() + 86_400_000).toISOString()
    const { key, res } = await createKey(admin, {
      description: 'partner',
      scopes: ['purchase_requests:write', 'files:read'],
      expiresAt,
    })
    expect(key).toMatchObject({ scopes: ['files:read', 'purchase_requests:write'], expiresAt })
    expect(await oneEvent('api_key.created', key.id, res)).toMatchObject({
      organization_id: admin.user.organizationId,
      actor_type: 'user',
      actor_id: admin.user.id,
      subject_type: 'api_key',
      data: { keyPrefix: key.keyPrefix, scopes: 'files:read purchase_requests:write' },
    })
  })

  it('lets an admin grant any scope', async () => {
    const { key } = await createKey(admin, { description: 'everything', scopes: [...SCOPES] })
    expect(key.scopes.toSorted()).toEqual([...SCOPES].sort())
  })

  it('refuses an unknown scope, no scope, a repeated scope, a past or invalid expiry and extra fields', async () => {
    const bodies = [
      { description: 'x', scopes: ['files:delete'] },
      { description: 'x', scopes: [] },
      { description: 'x' },
      { description: 'x', scopes: ['files:read', 'files:read'] },
      {
        description: 'x',
        scopes: ['files:read'],
        expiresAt: new Date(t.clock.now().getTime() - 1).toISOString(),
      },
      { description: 'x', scopes: ['files:read'], expiresAt: t.clock.now().toISOString() },
      { description: 'x', scopes: ['files:read'], expiresAt: 'tomorrow' },
      { description: '', scopes: ['files:read'] },
      { description: 'x', scopes: ['files:read'], organizationId: randomUUID() },
    ]
    for (const payload of bodies) {
      const res = await as(admin, { method: 'POST', url: '/api/api-keys', payload })
      expectProblem(res, 400, 'VALIDATION_FAILED')
    }
    const past = await as(admin, {
      method: 'POST',
      url: '/api/api-keys',
      payload: { description: 'x', scopes: ['files:read'], expiresAt: '2001-01-01T00:00:00Z' },
    })
    expect(past.json().errors).toEqual([{ path: 'body.expiresAt', message: 'must be in the future' }])
  })
})

describe('listing keys', () => {
  it('pages through the organization’s keys newest first with an opaque cursor', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const created: string[] = []
    for (let i = 0; i < 5; i++) {
      created.push((await createKey(owner, { description: `key ${i}`, scopes: ['files:read'] })).key.id)
      t.clock.advanceSeconds(1)
    }
    await createKey(admin, { description: 'another organization', scopes: ['files:read'] })

    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const query: string = cursor ? `limit=2&cursor=${cursor}` : 'limit=2'
      const res = await as(owner, { method: 'GET', url: `/api/api-keys?${query}` })
      expect(res.statusCode, res.body).toBe(200)
      const page = res.json() as { items: { id: string }[]; nextCursor: string | null }
      expect(page.items.length).toBeLessThanOrEqual(2)
      seen.push(...page.items.map((item) => item.id))
      cursor = page.nextCursor
      pages++
    } while (cursor)
    expect(pages).toBe(3)
    expect(seen).toEqual(created.toReversed())

    const whole = await as(owner, { method: 'GET', url: '/api/api-keys' })
    expect(whole.json()).toMatchObject({ nextCursor: null })
    expect(whole.json().items.map((item: { id: string }) => item.id)).toEqual(created.toReversed())
  })

  it('filters by state: active, revoked, expired', async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const active = (await createKey(owner, { description: 'active', scopes: ['files:read'] })).key
    const revoked = (await createKey(owner, { description: 'revoked', scopes: ['files:read'] })).key
    const expired = (
      await createKey(owner, {
        description: 'expired',
        scopes: ['files:read'],
        expiresAt: new Date(t.clock.now().getTime() + 60_000).toISOString(),
      })
    ).key
    expect((await as(owner, { method: 'DELETE', url: `/api/api-keys/${revoked.id}` })).statusCode).toBe(204)
    t.clock.advanceSeconds(61)

    const ids = async (state: string) => {
      const res = await as(owner, { method: 'GET', url: `/api/api-keys?state=${state}` })
      expect(res.statusCode).toBe(200)
      return res.json().items.map((item: { id: string }) => item.id)
    }
    expect(await ids('active')).toEqual([active.id])
    expect(await ids('revoked')).toEqual([revoked.id])
    expect(await ids('expired')).toEqual([expired.id])
    expectProblem(
      await as(owner, { method: 'GET', url: '/api/api-keys?state=lost' }),
      400,
      'VALIDATION_FAILED',
    )
  })

  it('refuses a cursor it did not write and a page size over 100', async () => {
    for (const query of [
      'cursor=abc',
      `cursor=${Buffer.from('["x","y"]').toString('base64url')}`,
      'limit=101',
    ]) {
      expectProblem(
        await as(admin, { method: 'GET', url: `/api/api-keys?${query}` }),
        400,
        'VALIDATION_FAILED',
      )
    }
  })
})

describe('revoking a key', () => {
  it('refuses the key with 401 at once, records api_key.revoked once, and answers 204 again', async () => {
    const { key } = await createKey(admin, { description: 'to revoke', scopes: ['audit:read'] })
    expect((await withKey(key.rawKey, '/api/audit-events')).statusCode).toBe(200)

    const res = await as(admin, { method: 'DELETE', url: `/api/api-keys/${key.id}` })
    expect(res.statusCode).toBe(204)
    expect(res.body).toBe('')
    expectProblem(await withKey(key.rawKey, '/api/audit-events'), 401, 'AUTHENTICATION_REQUIRED')
    expect(await oneEvent('api_key.revoked', key.id, res)).toMatchObject({
      organization_id: admin.user.organizationId,
      actor_type: 'user',
      actor_id: admin.user.id,
      data: { keyPrefix: key.keyPrefix },
    })

    const again = await as(admin, { method: 'DELETE', url: `/api/api-keys/${key.id}` })
    expect(again.statusCode).toBe(204)
    expect(await eventsOf('api_key.revoked', key.id)).toHaveLength(1)
    const listed = await as(admin, { method: 'GET', url: '/api/api-keys?state=revoked' })
    expect(listed.json().items.find((k: { id: string }) => k.id === key.id).revokedAt).toEqual(
      expect.any(String),
    )
  })

  it('answers 404 for another organization’s key, which keeps working, and for an unknown id', async () => {
    const other = await newActor(t.app, { role: 'admin' })
    const { key } = await createKey(other, { description: 'theirs', scopes: ['audit:read'] })
    expectProblem(await as(admin, { method: 'DELETE', url: `/api/api-keys/${key.id}` }), 404, 'NOT_FOUND')
    expectProblem(await as(admin, { method: 'GET', url: `/api/api-keys/${key.id}` }), 404, 'NOT_FOUND')
    expect((await withKey(key.rawKey, '/api/audit-events')).statusCode).toBe(200)
    expect(await eventsOf('api_key.revoked', key.id)).toEqual([])
    expectProblem(
      await as(admin, { method: 'DELETE', url: `/api/api-keys/${randomUUID()}` }),
      404,
      'NOT_FOUND',
    )
    expectProblem(
      await as(admin, { method: 'DELETE', url: '/api/api-keys/not-an-id' }),
      400,
      'VALIDATION_FAILED',
    )

    const listed = await as(admin, { method: 'GET', url: '/api/api-keys' })
    expect(listed.json().items.map((k: { id: string }) => k.id)).not.toContain(key.id)
  })
})

describe('who may manage keys', () => {
  it('refuses a member of the organization', async () => {
    const member = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'member' })
    const { key } = await createKey(admin, { description: 'kept', scopes: ['files:read'] })
    for (const request of [
      { method: 'GET', url: '/api/api-keys' },
      { method: 'POST', url: '/api/api-keys', payload: { description: 'x', scopes: ['files:read'] } },
      { method: 'GET', url: `/api/api-keys/${key.id}` },
      { method: 'DELETE', url: `/api/api-keys/${key.id}` },
    ] as const) {
      expectProblem(await as(member, request), 403, 'ACCESS_DENIED')
    }
    expect(await eventsOf('api_key.revoked', key.id)).toEqual([])
  })

  it('refuses API keys and service accounts whatever their scopes: a key never mints or revokes keys', async () => {
    const key = await newApiKey(t.app, admin.user.organizationId, [...SCOPES])
    await t.app.authz.outbox.runOnce()
    const bearer = await serviceBearer(t.app, [...SCOPES])
    for (const headers of [key.headers, bearer]) {
      for (const request of [
        { method: 'GET', url: '/api/api-keys' },
        { method: 'POST', url: '/api/api-keys', payload: { description: 'minted', scopes: ['files:read'] } },
        { method: 'GET', url: `/api/api-keys/${key.id}` },
        { method: 'DELETE', url: `/api/api-keys/${key.id}` },
      ] as const) {
        expectProblem(await t.app.inject({ ...request, headers }), 403, 'INSUFFICIENT_SCOPE')
      }
    }
    expect((await withKey(key.rawKey, '/api/audit-events')).statusCode).toBe(200)
  })

  it('answers 401 without credentials', async () => {
    for (const request of [
      { method: 'GET', url: '/api/api-keys' },
      { method: 'POST', url: '/api/api-keys', payload: { description: 'x', scopes: ['files:read'] } },
      { method: 'GET', url: `/api/api-keys/${randomUUID()}` },
      { method: 'DELETE', url: `/api/api-keys/${randomUUID()}` },
    ] as const) {
      expectProblem(await as(null, request), 401, 'AUTHENTICATION_REQUIRED')
    }
  })
})
