import type { FastifyInstance } from 'fastify'
import { describe, expect, it } from 'vitest'
import { AuthorizationUnavailableError } from '../src/authz/port.ts'
import { ACCOUNT_TEST_CONFIG, asUser, expectProblem, newActor, type Session } from './helpers/accounts.ts'
import { type TestApp, useTestApp } from './helpers/app.ts'
import { useAuthzTestApp } from './helpers/authz.ts'
import { testAuthzAdapter } from './helpers/authz-adapter.ts'

// A member removed from the organization keeps a valid access token until it expires; from the
// removal on, the purchase-request reads answer 403 ACCESS_DENIED. Both ways a read meets its
// check: the embedded evaluator reads and checks in one statement (checkWithRead); a port that can
// only be asked (an authorization server) is asked after the read.

describe.each<[string, () => TestApp]>([
  [
    testAuthzAdapter === 'embedded'
      ? 'the embedded evaluator (read and check in one statement)'
      : 'OpenFGA as configured (read, then check)',
    () => useTestApp({ config: ACCOUNT_TEST_CONFIG }),
  ],
  ['a port that is only asked (read, then check)', () => useAuthzTestApp()],
])('a member removed from the organization, with %s', (_name, use) => {
  const t = use()
  const list = (app: FastifyInstance, session: Session) =>
    asUser(app, session, { method: 'GET', url: '/api/purchase-requests' })
  const get = (app: FastifyInstance, session: Session, id: string) =>
    asUser(app, session, { method: 'GET', url: `/api/purchase-requests/${id}` })

  it('gets 403 ACCESS_DENIED on the list and on a request it created, which it read before', async () => {
    const { user, session } = await newActor(t.app)
    const created = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/purchase-requests',
      payload: { title: 'Chairs' },
    })
    expect(created.statusCode).toBe(201)
    const id: string = created.json().id
    await t.app.authz.outbox.runOnce()
    const before = await list(t.app, session)
    expect(before.statusCode).toBe(200)
    expect(before.json().items.map((item: { id: string }) => item.id)).toEqual([id])
    expect((await get(t.app, session, id)).statusCode).toBe(200)

    const membership = {
      user: `user:${user.id}`,
      relation: 'member',
      object: `organization:${user.organizationId}`,
    }
    await t.app.authz.port.write([], [membership])
    expectProblem(await list(t.app, session), 403, 'ACCESS_DENIED')
    expectProblem(await get(t.app, session, id), 403, 'ACCESS_DENIED')
  })
})

describe('a purchase request read while the authorization server is down', () => {
  const t = useAuthzTestApp()

  it('is 404 when it does not exist (nothing to ask about) and 503 when it does, never 200', async () => {
    const { session } = await newActor(t.app)
    const created = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/purchase-requests',
      payload: { title: 'Desks' },
    })
    expect(created.statusCode).toBe(201)
    await t.app.authz.outbox.runOnce()
    t.port.failures.check = new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')
    try {
      const missing = '00000000-0000-4000-8000-000000000000'
      expectProblem(
        await asUser(t.app, session, { method: 'GET', url: `/api/purchase-requests/${missing}` }),
        404,
        'NOT_FOUND',
      )
      expectProblem(
        await asUser(t.app, session, { method: 'GET', url: `/api/purchase-requests/${created.json().id}` }),
        503,
        'SERVICE_UNAVAILABLE',
      )
      // The list needs the membership even for an empty page.
      expectProblem(
        await asUser(t.app, session, { method: 'GET', url: '/api/purchase-requests?status=APPROVED' }),
        503,
        'SERVICE_UNAVAILABLE',
      )
    } finally {
      t.port.failures.check = undefined
    }
  })
})
