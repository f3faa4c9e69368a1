import { randomUUID } from 'node:crypto'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { AuthorizationUnavailableError } from '../src/authz/port.ts'
import { expectProblem, newUser, type Session, signIn, type TestUser } from './helpers/accounts.ts'
import { queueOwnedPurchaseRequest, useAuthzTestApp } from './helpers/authz.ts'
import { newApiKey, serviceBearer } from './helpers/machines.ts'

// The permission check: over HTTP, for users, API keys and
// service accounts, against tuples delivered through the outbox. A denied check is 200
// {allowed: false}, never 403; a check that cannot be answered is 503, never an allow.

const t = useAuthzTestApp()

afterEach(() => {
  t.port.failures = {}
})

type Credentials = Pick<InjectOptions, 'cookies' | 'headers'>

const asSession = (session: Session): Credentials => ({ cookies: { access_token: session.access } })

function check(
  credentials: Credentials | null,
  payload: Record<string, unknown>,
): Promise<LightMyRequestResponse> {
  return t.app.inject({ method: 'POST', url: '/api/authz/check', payload, ...credentials })
}

/** `allowed` of a check that must answer 200. */
async function allowed(credentials: Credentials, relation: string, objectType: string, objectId: string) {
  const res = await check(credentials, { relation, objectType, objectId })
  expect(res.statusCode).toBe(200)
  return res.json().allowed
}

const deliver = () => t.app.authz.outbox.runOnce()

/** An organization with a member, an admin and a purchase request it owns, all delivered. */
async function organizationWithPurchaseRequest() {
  const member = await newUser(t.app)
  const admin = await newUser(t.app, { organizationId: member.organizationId, role: 'admin' })
  const purchaseRequest = await queueOwnedPurchaseRequest(t.app, member.organizationId)
  await deliver()
  return {
    organizationId: member.organizationId,
    purchaseRequest,
    member: asSession(await signIn(t.app, member)),
    admin: asSession(await signIn(t.app, admin)),
  }
}

async function apiKey(organizationId: string, scopes: string[]): Promise<Credentials> {
  return { headers: (await newApiKey(t.app, organizationId, scopes)).headers }
}

const VALID = { relation: 'member', objectType: 'organization', objectId: randomUUID() }

describe('POST /api/authz/check', () => {
  let home: Awaited<ReturnType<typeof organizationWithPurchaseRequest>>
  let stranger: Credentials

  beforeAll(async () => {
    home = await organizationWithPurchaseRequest()
    stranger = (await organizationWithPurchaseRequest()).admin
  })

  it('requires an authenticated principal, before looking at the body', async () => {
    expectProblem(await check(null, VALID), 401, 'AUTHENTICATION_REQUIRED')
    expectProblem(
      await check(null, { relation: 'no such', unexpected: true }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
  })

  it("answers a user's membership of their organization once the role tuple is delivered", async () => {
    const user: TestUser = await newUser(t.app)
    const session = asSession(await signIn(t.app, user))
    // While the server cannot take the queued role tuple, the answer is no.
    t.port.failures.write = new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')
    expect(await allowed(session, 'member', 'organization', user.organizationId)).toBe(false)
    // Once it can, the check delivers the queued change it depends on before answering
    // (read-your-writes without the write holding its response).
    t.port.failures = {}
    t.clock.advance(5 * 60_000)
    expect(await allowed(session, 'member', 'organization', user.organizationId)).toBe(true)
    expect(t.port.delivered).toContain(`write user:${user.id} member organization:${user.organizationId}`)
  })

  it('answers 200 {allowed: false}, never 403, for a relation the caller lacks', async () => {
    const res = await check(home.member, {
      relation: 'admin',
      objectType: 'organization',
      objectId: home.organizationId,
    })
    expect({ status: res.statusCode, body: res.json() }).toEqual({ status: 200, body: { allowed: false } })
  })

  it("lets members view, and admins view and edit, their organization's purchase request", async () => {
    const pr = home.purchaseRequest
    expect(await allowed(home.member, 'can_view', 'purchase_request', pr)).toBe(true)
    expect(await allowed(home.member, 'can_edit', 'purchase_request', pr)).toBe(false)
    expect(await allowed(home.admin, 'can_view', 'purchase_request', pr)).toBe(true)
    expect(await allowed(home.admin, 'can_edit', 'purchase_request', pr)).toBe(true)
  })

  it("answers false for another organization's admin", async () => {
    expect(await allowed(stranger, 'can_view', 'purchase_request', home.purchaseRequest)).toBe(false)
    expect(await allowed(stranger, 'can_edit', 'purchase_request', home.purchaseRequest)).toBe(false)
    expect(await allowed(stranger, 'member', 'organization', home.organizationId)).toBe(false)
  })

  it('refuses an object type the model does not have, naming body.objectType', async () => {
    const res = await check(home.member, { ...VALID, objectType: 'invoice' })
    expectProblem(res, 400, 'VALIDATION_FAILED')
    expect(res.json().errors).toEqual([{ path: 'body.objectType', message: expect.any(String) }])
  })

  it('refuses a relation the object type does not have, naming body.relation', async () => {
    for (const [relation, objectType] of [
      ['owner', 'organization'],
      ['can_view', 'organization'],
      ['member', 'user'],
    ]) {
      const res = await check(home.member, { ...VALID, relation, objectType })
      expectProblem(res, 400, 'VALIDATION_FAILED')
      expect(res.json().errors).toEqual([{ path: 'body.relation', message: expect.any(String) }])
    }
  })

  it.each(['a#member', 'organization:x', 'two words', ' leading', '*', ''])(
    'refuses the object id %j',
    async (objectId) => {
      const res = await check(home.member, { ...VALID, objectId })
      expectProblem(res, 400, 'VALIDATION_FAILED')
      expect(res.json().errors.map((e: { path: string }) => e.path)).toEqual(['body.objectId'])
    },
  )

  it('refuses missing fields and fields it does not know', async () => {
    expectProblem(
      await check(home.member, { relation: 'member', objectType: 'organization' }),
      400,
      'VALIDATION_FAILED',
    )
    expectProblem(await check(home.member, { ...VALID, user: 'user:someone-else' }), 400, 'VALIDATION_FAILED')
  })

  it('answers an API key with the authz:check scope for its own subject', async () => {
    const key = await apiKey(home.organizationId, ['authz:check'])
    t.port.failures.write = new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')
    expect(await allowed(key, 'can_view', 'purchase_request', home.purchaseRequest)).toBe(false)
    t.port.failures = {}
    t.clock.advance(5 * 60_000)
    expect(await allowed(key, 'member', 'organization', home.organizationId)).toBe(true)
    expect(await allowed(key, 'can_view', 'purchase_request', home.purchaseRequest)).toBe(true)
    expect(await allowed(key, 'can_edit', 'purchase_request', home.purchaseRequest)).toBe(false)
  })

  it('refuses an API key without the authz:check scope with 403 INSUFFICIENT_SCOPE', async () => {
    const key = await apiKey(home.organizationId, ['purchase_requests:read', 'files:read'])
    expectProblem(await check(key, VALID), 403, 'INSUFFICIENT_SCOPE')
  })

  it('answers false for a service account: it has no organization and no subject in the model', async () => {
    const bearer = { headers: await serviceBearer(t.app, ['authz:check'], `checker-${randomUUID()}`) }
    const res = await check(bearer, {
      relation: 'can_view',
      objectType: 'purchase_request',
      objectId: home.purchaseRequest,
    })
    expect({ status: res.statusCode, body: res.json() }).toEqual({ status: 200, body: { allowed: false } })
  })

  describe('fails closed', () => {
    it.each([
      ['unavailable', new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')],
      [
        'failing with any other error',
        new TypeError("Cannot read properties of undefined (reading 'allowed')"),
      ],
    ])('answers 503 SERVICE_UNAVAILABLE with Retry-After when the server is %s', async (_, error) => {
      t.port.failures.check = error
      const res = await check(home.admin, {
        relation: 'can_view',
        objectType: 'purchase_request',
        objectId: home.purchaseRequest,
      })
      expectProblem(res, 503, 'SERVICE_UNAVAILABLE')
      expect(res.headers['retry-after']).toMatch(/^\d+$/)
      expect(res.json()).not.toHaveProperty('allowed')
      expect(res.body).not.toContain(error.message)
    })

    it('reports authorization DOWN on /health/ready when the server does not answer', async () => {
      t.port.failures.ready = new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')
      const res = await t.app.inject({ method: 'GET', url: '/health/ready' })
      expectProblem(res, 503, 'SERVICE_UNAVAILABLE')
      expect(res.json().checks).toEqual({ database: 'UP', authorization: 'DOWN', storage: 'UP' })
      t.port.failures = {}
      const healed = await t.app.inject({ method: 'GET', url: '/health/ready' })
      expect(healed.json()).toEqual({
        status: 'UP',
        checks: { database: 'UP', authorization: 'UP', storage: 'UP' },
      })
    })
  })

  it('is documented in OpenAPI with x-required-scope authz:check', async () => {
    const document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    const operation = document.paths['/api/authz/check'].post
    expect(operation['x-required-scope']).toBe('authz:check')
    expect(operation.security).toEqual([
      { accessCookie: [] },
      { bearerAuth: ['authz:check'] },
      { apiKey: ['authz:check'] },
    ])
  })
})
