import { beforeEach, describe, expect, it } from 'vitest'
import {
  asUser,
  confirmPassword,
  deliverMail,
  expectProblem,
  linkToken,
  login,
  mailsTo,
  newUser,
  PASSWORD,
  refresh,
  type Session,
  signIn,
  type TestUser,
  useMailTestApp,
} from './helpers/accounts.ts'
import { queuedChangesOf } from './helpers/authz.ts'
import { newApiKey, serviceBearer } from './helpers/machines.ts'

// Account administration by organization admins: accounts
// are deactivated, never deleted; deactivation revokes sessions and the role tuple; the last active
// admin stays; admin-triggered resets mail a working link. Only signed-in admins of the same
// organization may do any of it.

const NEW_PASSWORD = 'a brand new passphrase'

const t = useMailTestApp()

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

type Action = 'deactivate' | 'reactivate' | 'reset-password'

function act(session: Session | null, action: Action, userId: string, headers: Record<string, string> = {}) {
  return asUser(t.app, session, { method: 'POST', url: `/api/users/${userId}/${action}`, headers })
}

/** An organization with a signed-in admin and a signed-in member. */
async function organization(): Promise<{
  admin: TestUser
  adminSession: Session
  member: TestUser
  memberSession: Session
}> {
  const admin = await newUser(t.app, { role: 'admin' })
  const member = await newUser(t.app, { organizationId: admin.organizationId })
  return {
    admin,
    adminSession: await signIn(t.app, admin),
    member,
    memberSession: await signIn(t.app, member),
  }
}

const storedAccount = (id: string) =>
  t.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

const tuplesOf = (userId: string) => queuedChangesOf(t.app, `user:${userId}`)

const roleTuple = (operation: 'write' | 'delete', user: TestUser, relation = 'member') => ({
  operation,
  subject: `user:${user.id}`,
  relation,
  object: `organization:${user.organizationId}`,
})

describe('POST /api/users/{id}/deactivate and /reactivate', () => {
  it('deactivates a user: sessions revoked, login refused like a wrong password, row kept, role tuple deleted', async () => {
    const { adminSession, member, memberSession } = await organization()
    const other = await signIn(t.app, member)

    const res = await act(adminSession, 'deactivate', member.id)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ userId: member.id, active: false })

    expectProblem(await refresh(t.app, memberSession), 401, 'REFRESH_TOKEN_INVALID')
    expectProblem(await refresh(t.app, other), 401, 'REFRESH_TOKEN_INVALID')

    const deactivated = await login(t.app, member.email, PASSWORD)
    const wrongPassword = await login(t.app, (await newUser(t.app)).email, 'not the right password')
    expectProblem(deactivated, 401, 'INVALID_CREDENTIALS')
    expect(deactivated.json()).toEqual(wrongPassword.json())
    expect(deactivated.headers['set-cookie']).toBeUndefined()

    expect(await storedAccount(member.id)).toMatchObject({ email: member.email, active: false })
    expect(await tuplesOf(member.id)).toEqual([roleTuple('write', member), roleTuple('delete', member)])
  })

  it('answers deactivating an already deactivated user with 200 and queues no second tuple delete', async () => {
    const { adminSession, member } = await organization()
    expect((await act(adminSession, 'deactivate', member.id)).statusCode).toBe(200)
    const again = await act(adminSession, 'deactivate', member.id)
    expect(again.statusCode).toBe(200)
    expect(again.json()).toEqual({ userId: member.id, active: false })
    expect(await tuplesOf(member.id)).toEqual([roleTuple('write', member), roleTuple('delete', member)])
  })

  it('reactivates a deactivated user, who can sign in again, and writes the role tuple back', async () => {
    const { adminSession, member } = await organization()
    expect((await act(adminSession, 'deactivate', member.id)).statusCode).toBe(200)

    const res = await act(adminSession, 'reactivate', member.id)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ userId: member.id, active: true })
    expect((await login(t.app, member.email, PASSWORD)).statusCode).toBe(200)
    expect(await tuplesOf(member.id)).toEqual([
      roleTuple('write', member),
      roleTuple('delete', member),
      roleTuple('write', member),
    ])
  })

  it("answers another organization's user with 404 and leaves that user untouched", async () => {
    const { adminSession } = await organization()
    const stranger = await newUser(t.app)
    const strangerSession = await signIn(t.app, stranger)

    for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
      expectProblem(await act(adminSession, action, stranger.id), 404, 'NOT_FOUND')
    }
    expect((await storedAccount(stranger.id)).active).toBe(true)
    expect((await refresh(t.app, strangerSession)).statusCode).toBe(200)
    expect(await tuplesOf(stranger.id)).toEqual([roleTuple('write', stranger)])
    expect(await deliverMail(t)).toBe(0)
  })

  it("refuses to deactivate the organization's last active admin with 409 LAST_ADMIN, the admin themself included", async () => {
    const { admin, adminSession } = await organization()
    expectProblem(await act(adminSession, 'deactivate', admin.id), 409, 'LAST_ADMIN')
    expect((await storedAccount(admin.id)).active).toBe(true)
    expect((await refresh(t.app, adminSession)).statusCode).toBe(200)

    // With a second admin, one of them may go, but not the one left after that.
    const second = await newUser(t.app, { organizationId: admin.organizationId, role: 'admin' })
    expect((await act(adminSession, 'deactivate', second.id)).statusCode).toBe(200)
    expectProblem(await act(await signIn(t.app, admin), 'deactivate', admin.id), 409, 'LAST_ADMIN')
    expect((await storedAccount(admin.id)).active).toBe(true)
  })

  it('lets exactly one of two admins deactivating each other in parallel succeed, leaving one active admin', async () => {
    const first = await newUser(t.app, { role: 'admin' })
    const second = await newUser(t.app, { organizationId: first.organizationId, role: 'admin' })
    const [firstSession, secondSession] = [await signIn(t.app, first), await signIn(t.app, second)]

    const results = await Promise.all([
      act(firstSession, 'deactivate', second.id),
      act(secondSession, 'deactivate', first.id),
    ])
    const succeeded = results.filter((r) => r.statusCode === 200)
    const refused = results.filter((r) => r.statusCode !== 200)
    expect(succeeded).toHaveLength(1)
    expect(refused).toHaveLength(1)
    // The loser answers 409 LAST_ADMIN when both requests pass the caller check before either
    // commits (typical on PostgreSQL), and 403 ACCESS_DENIED when its transaction starts after the
    // winner's commit, which made the loser a deactivated account (always on PGlite, whose
    // transactions are serialised). Either way the invariant holds: one active admin is left.
    const loser = refused[0] as (typeof results)[number]
    expect([
      { status: 409, code: 'LAST_ADMIN' },
      { status: 403, code: 'ACCESS_DENIED' },
    ]).toContainEqual({ status: loser.statusCode, code: loser.json().code })

    const active = await t.app.db
      .selectFrom('accounts')
      .select('id')
      .where('organization_id', '=', first.organizationId)
      .where('role', '=', 'admin')
      .where('active', '=', true)
      .execute()
    expect(active).toHaveLength(1)
  })
})

describe('POST /api/users/{id}/reset-password', () => {
  it('answers 202 {} and mails the user a reset link that sets a new password', async () => {
    const { adminSession, member, memberSession } = await organization()
    const res = await act(adminSession, 'reset-password', member.id)
    expect(res.statusCode).toBe(202)
    expect(res.json()).toEqual({})

    expect(await deliverMail(t)).toBe(1)
    const [mail] = await mailsTo(t.smtp, member.email)
    expect(mail?.subject).toBe('Reset your password')
    const token = linkToken(mail, '/reset-password')

    expect((await confirmPassword(t.app, token, NEW_PASSWORD)).statusCode).toBe(200)
    expect((await login(t.app, member.email, NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(await login(t.app, member.email, PASSWORD), 401, 'INVALID_CREDENTIALS')
    expectProblem(await refresh(t.app, memberSession), 401, 'REFRESH_TOKEN_INVALID')
  })
})

describe('who may administer accounts', () => {
  it('answers a member (not an admin) with 403 ACCESS_DENIED on every admin action', async () => {
    const { admin, member, memberSession } = await organization()
    const colleague = await newUser(t.app, { organizationId: member.organizationId })
    for (const target of [colleague.id, admin.id, member.id]) {
      for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
        expectProblem(await act(memberSession, action, target), 403, 'ACCESS_DENIED')
      }
    }
    expect((await storedAccount(colleague.id)).active).toBe(true)
    expect((await storedAccount(admin.id)).active).toBe(true)
    expect(await deliverMail(t)).toBe(0)
  })

  it('answers an unauthenticated caller with 401 AUTHENTICATION_REQUIRED', async () => {
    const { member } = await organization()
    for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
      expectProblem(await act(null, action, member.id), 401, 'AUTHENTICATION_REQUIRED')
    }
    expect((await storedAccount(member.id)).active).toBe(true)
  })

  it("answers an API key of the user's organization with 403 INSUFFICIENT_SCOPE", async () => {
    const { member } = await organization()
    const key = await newApiKey(t.app, member.organizationId, [
      'purchase_requests:write',
      'config:write',
      'files:write',
    ])
    for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
      expectProblem(
        await act(null, action, member.id, { 'x-api-key': key.rawKey }),
        403,
        'INSUFFICIENT_SCOPE',
      )
    }
    const invite = await t.app.inject({
      method: 'POST',
      url: '/api/users',
      headers: { 'x-api-key': key.rawKey },
      payload: { email: 'from-a-key@example.com', organizationId: member.organizationId },
    })
    expectProblem(invite, 403, 'INSUFFICIENT_SCOPE')
    expect((await storedAccount(member.id)).active).toBe(true)
  })

  it('answers a service-account bearer token with 403 INSUFFICIENT_SCOPE', async () => {
    const { member } = await organization()
    const { authorization } = await serviceBearer(
      t.app,
      ['purchase_requests:write', 'config:write'],
      'admin-test-backend',
    )
    for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
      expectProblem(await act(null, action, member.id, { authorization }), 403, 'INSUFFICIENT_SCOPE')
    }
    expect((await storedAccount(member.id)).active).toBe(true)
  })
})
