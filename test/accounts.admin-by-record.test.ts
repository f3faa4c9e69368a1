import type { LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { initializeOpenFga } from '../src/authz/init.ts'
import { loadModel } from '../src/authz/model.ts'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  expectProblem,
  newUser,
  type Session,
  signIn,
  type TestUser,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp, useTestApp, useTestAppBeside } from './helpers/app.ts'
import { applyTupleChanges } from './helpers/authz.ts'
import { type OpenFgaServer, openFgaAvailable, startOpenFga } from './helpers/openfga-server.ts'

// Account administration (every /api/users operation) is decided by the caller's account row, read
// in the operation's transaction: active, role admin, of the tenant's organization. The
// authorization port is never asked, so neither its outage nor a tuple that disagrees with the row
// (a leftover admin tuple, a missing one) changes the answer, and a demotion committed by any
// instance refuses the demoted admin's next call on every other.

type Operation = { name: string; send: (session: Session) => Promise<LightMyRequestResponse> }

/** The eight administration operations, each aimed at `target` in `organizationId`. */
function operations(app: TestApp['app'], organizationId: string, target: () => TestUser): Operation[] {
  const post = (path: string, payload?: object) => (session: Session) =>
    asUser(app, session, { method: 'POST', url: path, ...(payload ? { payload } : {}) })
  return [
    { name: 'list', send: (s) => asUser(app, s, { method: 'GET', url: '/api/users' }) },
    {
      name: 'invite',
      send: (s) => post('/api/users', { email: uniqueEmail('invited'), organizationId, role: 'member' })(s),
    },
    {
      name: 'change role',
      send: (s) =>
        asUser(app, s, { method: 'PATCH', url: `/api/users/${target().id}`, payload: { role: 'member' } }),
    },
    { name: 'unlock', send: (s) => post(`/api/users/${target().id}/unlock`)(s) },
    { name: 'resend invitation', send: (s) => post(`/api/users/${target().id}/resend-invitation`)(s) },
    { name: 'reset password', send: (s) => post(`/api/users/${target().id}/reset-password`)(s) },
    { name: 'deactivate', send: (s) => post(`/api/users/${target().id}/deactivate`)(s) },
    { name: 'reactivate', send: (s) => post(`/api/users/${target().id}/reactivate`)(s) },
  ]
}

/** What an operation that was let through answers: its success status, or the target's own state. */
function letThrough(res: LightMyRequestResponse): boolean {
  if (res.statusCode < 300) return true
  // An invitation is resent only to an invitee: the refusal is about the target, not the caller.
  return res.statusCode === 409 && res.json().code === 'INVALID_TRANSITION'
}

describe('a member whose account row says member, with a leftover admin tuple', () => {
  const t = useMailTestApp()

  it('is refused every /api/users operation with 403, and nothing changes', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const target = await newUser(t.app, { organizationId: admin.organizationId })
    const session = await signIn(t.app, member)
    // The tuple a demotion would remove, still there (a queued delete, or written by mistake).
    await applyTupleChanges(t.app, [
      {
        operation: 'write',
        subject: `user:${member.id}`,
        relation: 'admin',
        object: `organization:${admin.organizationId}`,
      },
    ])
    const check = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/authz/check',
      payload: { relation: 'admin', objectType: 'organization', objectId: admin.organizationId },
    })
    expect(check.json()).toEqual({ allowed: true })

    const before = await t.app.db.selectFrom('accounts').selectAll().orderBy('id').execute()
    for (const operation of operations(t.app, admin.organizationId, () => target)) {
      const res = await operation.send(session)
      expect({ operation: operation.name, status: res.statusCode, code: res.json().code }).toEqual({
        operation: operation.name,
        status: 403,
        code: 'ACCESS_DENIED',
      })
    }
    expect(await t.app.db.selectFrom('accounts').selectAll().orderBy('id').execute()).toEqual(before)
    await t.app.background.idle()
    expect(await t.app.mail.worker.runOnce()).toBe(0)
  })
})

describe.runIf(openFgaAvailable)('administration while the OpenFGA server is stopped', () => {
  let server: OpenFgaServer
  let t: TestApp

  beforeAll(async () => {
    server = await startOpenFga()
    const ids = await initializeOpenFga(server.url, server.apiToken, await loadModel())
    t = await createTestApp({
      config: {
        ...ACCOUNT_TEST_CONFIG,
        'platform.authz.openfga.api-url': server.url,
        'platform.authz.openfga.store-id': ids.storeId,
        'platform.authz.openfga.model-id': ids.modelId,
      },
    })
  }, 60_000)

  afterAll(async () => {
    await t?.close()
    await server?.stop()
  })

  it('answers every /api/users operation from the account table', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const session = await signIn(t.app, admin)
    let target = await newUser(t.app, { organizationId: admin.organizationId })
    await t.app.authz.outbox.runOnce()
    await server.stop()

    // The authorization server is really gone: a resource check fails closed.
    const check = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/authz/check',
      payload: { relation: 'admin', objectType: 'organization', objectId: admin.organizationId },
    })
    expectProblem(check, 503, 'SERVICE_UNAVAILABLE')

    for (const operation of operations(t.app, admin.organizationId, () => target)) {
      const res = await operation.send(session)
      expect({ operation: operation.name, letThrough: letThrough(res), body: res.json() }).toMatchObject({
        operation: operation.name,
        letThrough: true,
      })
      if (operation.name === 'invite') {
        // The next operations act on the invitee, so that resending an invitation has one to resend.
        const { userId } = res.json() as { userId: string }
        target = { ...target, id: userId }
      }
    }
    const invitee = await t.app.db
      .selectFrom('accounts')
      .select(['active', 'deactivated_at'])
      .where('id', '=', target.id)
      .executeTakeFirstOrThrow()
    // Deactivated, then reactivated: an invitee goes back to invited.
    expect(invitee).toEqual({ active: false, deactivated_at: null })
  }, 60_000)
})

describe('a demotion committed on one instance', () => {
  const a = useTestApp({ config: ACCOUNT_TEST_CONFIG })
  const b = useTestAppBeside(a, { config: ACCOUNT_TEST_CONFIG })

  it("refuses the demoted admin's next administration call on the other instance", async () => {
    const first = await newUser(a.app, { role: 'admin' })
    const second = await newUser(a.app, { role: 'admin', organizationId: first.organizationId })
    const member = await newUser(a.app, { organizationId: first.organizationId })
    const onB = await signIn(b.app, second)
    const listed = await asUser(b.app, onB, { method: 'GET', url: '/api/users' })
    expect(listed.statusCode).toBe(200)

    const byFirst = await signIn(a.app, first)
    const demoted = await asUser(a.app, byFirst, {
      method: 'PATCH',
      url: `/api/users/${second.id}`,
      payload: { role: 'member' },
    })
    expect(demoted.json()).toMatchObject({ id: second.id, role: 'member' })

    // The access token B verifies is still valid: the account row alone refuses.
    expectProblem(await asUser(b.app, onB, { method: 'GET', url: '/api/users' }), 403, 'ACCESS_DENIED')
    expectProblem(
      await asUser(b.app, onB, { method: 'POST', url: `/api/users/${member.id}/deactivate` }),
      403,
      'ACCESS_DENIED',
    )
    const stored = await b.app.db
      .selectFrom('accounts')
      .select('active')
      .where('id', '=', member.id)
      .executeTakeFirstOrThrow()
    expect(stored.active).toBe(true)
  })
})
