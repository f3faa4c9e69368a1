import { randomBytes, randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { type Selectable, sql } from 'kysely'
import { beforeEach, describe, expect, it } from 'vitest'
import type { AuditEventTable } from '../src/db/schema.ts'
import {
  type Actor,
  asUser,
  confirmPassword,
  deliverMail,
  expectProblem,
  linkToken,
  login,
  mailsTo,
  newActor,
  newUser,
  PASSWORD,
  refresh,
  type Session,
  signIn,
  type TestUser,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { queuedChangesOf } from './helpers/authz.ts'
import { newDeliveredApiKey } from './helpers/machines.ts'

// The account endpoints an admin console is built on: the signed-in user (GET /api/auth/me), the
// organization's accounts with their derived status (GET /api/users), a role change, an unlock, a
// fresh invitation, and the user's own password change. Each is refused to members (403), answers
// another organization's user as if it did not exist (404), records its audit event in the
// transaction of its change (none when the change rolls back or changes nothing) and, where it
// ends access, ends it at once: session versions are on, so a stale access token is refused.

const t = useMailTestApp({ config: { 'platform.auth.session-version.enabled': 'true' } })

const AGENT = 'console-test/1.0'
const IP = '203.0.113.41'
const NEW_PASSWORD = 'a brand new passphrase'

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

/** A request as the signed-in user (or unauthenticated), from IP with AGENT. */
const as = (session: Session | null, options: Parameters<typeof asUser>[2]) =>
  asUser(t.app, session, {
    remoteAddress: IP,
    ...options,
    headers: { 'user-agent': AGENT, ...(options.headers ?? {}) },
  })

const me = (session: Session | null) => as(session, { method: 'GET', url: '/api/auth/me' })
const list = (session: Session | null, query = '') =>
  as(session, { method: 'GET', url: `/api/users${query}` })
const changeRole = (session: Session | null, userId: string, role: string) =>
  as(session, { method: 'PATCH', url: `/api/users/${userId}`, payload: { role } })
const unlock = (session: Session | null, userId: string) =>
  as(session, { method: 'POST', url: `/api/users/${userId}/unlock` })
const resend = (session: Session | null, userId: string) =>
  as(session, { method: 'POST', url: `/api/users/${userId}/resend-invitation` })
const changePassword = (session: Session | null, currentPassword: string, newPassword: string) =>
  as(session, { method: 'POST', url: '/api/auth/password/change', payload: { currentPassword, newPassword } })

type EventRow = Selectable<AuditEventTable>

const eventsOf = (type: string, subjectId: string): Promise<EventRow[]> =>
  t.app.db
    .selectFrom('audit_events')
    .selectAll()
    .where('type', '=', type)
    .where('subject_id', '=', subjectId)
    .execute() as Promise<EventRow[]>

/** Exactly one event of `type` about `subjectId`, carrying the origin of the request `res` answered. */
async function oneEvent(type: string, subjectId: string, res: LightMyRequestResponse): Promise<EventRow> {
  const events = await eventsOf(type, subjectId)
  expect(events, type).toHaveLength(1)
  const event = events[0] as EventRow
  expect(event.ip_address).toBe(IP)
  expect(event.user_agent).toBe(AGENT)
  expect(event.request_id).toBe(res.headers['x-request-id'])
  return event
}

const storedAccount = (id: string) =>
  t.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

/** An organization with a signed-in admin and a signed-in member, their role tuples delivered. */
async function organization(): Promise<{ admin: Actor; member: Actor }> {
  const admin = await newActor(t.app, { role: 'admin' })
  const member = await newActor(t.app, { organizationId: admin.user.organizationId })
  return { admin, member }
}

/** Invites a new address into the admin's organization; returns the invitee's id and email. */
async function invitee(admin: Actor): Promise<{ id: string; email: string }> {
  const email = uniqueEmail('invitee')
  const res = await as(admin.session, {
    method: 'POST',
    url: '/api/users',
    payload: { email, organizationId: admin.user.organizationId },
  })
  expect(res.statusCode).toBe(202)
  return { id: res.json().userId, email }
}

/** Locks the account by failing to sign in as often as the lockout allows (5). */
async function lockOut(user: TestUser): Promise<void> {
  for (let i = 0; i < 5; i++) await login(t.app, user.email, 'not the password at all')
  expectProblem(await login(t.app, user.email, user.password), 401, 'ACCOUNT_LOCKED')
}

/** A passkey row of the account (what the counts count; no ceremony needed for that). */
async function addPasskey(user: TestUser): Promise<void> {
  await t.app.db
    .insertInto('passkeys')
    .values({
      account_id: user.id,
      organization_id: user.organizationId,
      credential_id: randomBytes(16).toString('base64url'),
      public_key: randomBytes(32),
      counter: 0,
      transports: ['internal'],
      device_type: 'multiDevice',
      backed_up: true,
      aaguid: randomUUID(),
      name: 'Laptop',
      created_at: t.clock.now(),
    })
    .execute()
}

const ACCOUNT_COLUMN = { accounts: 'id', one_time_tokens: 'account_id', sessions: 'user_id' } as const

/**
 * Makes the commit of every transaction that writes a row of `table` belonging to `accountId` fail
 * (a deferred constraint trigger raises at COMMIT, after everything else in the transaction ran);
 * returns what removes it.
 */
async function failingCommit(
  table: keyof typeof ACCOUNT_COLUMN,
  accountId: string,
): Promise<() => Promise<void>> {
  const column = ACCOUNT_COLUMN[table]
  await sql`create or replace function test_failing_commit() returns trigger language plpgsql as $$
    begin raise exception 'the commit fails'; end $$`.execute(t.app.db)
  await sql`create constraint trigger test_failing_commit after insert or update on ${sql.table(table)}
    deferrable initially deferred for each row
    when (new.${sql.ref(column)} = ${sql.lit(accountId)}::uuid)
    execute function test_failing_commit()`.execute(t.app.db)
  return async () => {
    await sql`drop trigger test_failing_commit on ${sql.table(table)}`.execute(t.app.db)
  }
}

describe('GET /api/auth/me', () => {
  it('answers the signed-in user, its organization, role, second factors and the current session', async () => {
    const { admin, member } = await organization()
    await addPasskey(member.user)
    await addPasskey(member.user)
    await t.app.db
      .updateTable('accounts')
      .set({ otp_enabled: true })
      .where('id', '=', member.user.id)
      .execute()
    const stored = await t.app.db
      .selectFrom('organizations')
      .select('name')
      .where('id', '=', member.user.organizationId)
      .executeTakeFirstOrThrow()

    const res = await me(member.session)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      userId: member.user.id,
      email: member.user.email,
      organizationId: member.user.organizationId,
      organizationName: stored.name,
      role: 'member',
      otpEnabled: true,
      otpRequired: false,
      passkeyCount: 2,
      sessionId: member.session.sessionId,
      impersonatorId: null,
    })
    expect((await me(admin.session)).json()).toMatchObject({
      userId: admin.user.id,
      role: 'admin',
      otpEnabled: false,
      // The default platform.auth.otp.required-for-roles: admin.
      otpRequired: true,
      passkeyCount: 0,
      sessionId: admin.session.sessionId,
    })
  })

  it('answers 401 without a session and 403 to an API key, which is no user', async () => {
    expectProblem(await me(null), 401, 'AUTHENTICATION_REQUIRED')
    const { admin } = await organization()
    const key = await newDeliveredApiKey(t.app, admin.user.organizationId, ['config:write', 'audit:read'])
    expectProblem(
      await t.app.inject({ method: 'GET', url: '/api/auth/me', headers: key.headers }),
      403,
      'INSUFFICIENT_SCOPE',
    )
  })
})

describe('GET /api/users', () => {
  it("lists the organization's accounts by email with their status, and no other organization's", async () => {
    const { admin, member } = await organization()
    const invited = await invitee(admin)
    const deactivated = await newUser(t.app, { organizationId: admin.user.organizationId })
    expect(
      (await as(admin.session, { method: 'POST', url: `/api/users/${deactivated.id}/deactivate` }))
        .statusCode,
    ).toBe(200)
    const locked = await newUser(t.app, { organizationId: admin.user.organizationId })
    await lockOut(locked)
    await addPasskey(member.user)
    const stranger = await newUser(t.app)

    const res = await list(admin.session)
    expect(res.statusCode).toBe(200)
    const { items, nextCursor } = res.json()
    expect(nextCursor).toBeNull()
    const emails = [admin.user.email, member.user.email, invited.email, deactivated.email, locked.email]
    expect(items.map((item: { email: string }) => item.email)).toEqual(
      [...emails].sort((a, b) => a.toLowerCase().localeCompare(b.toLowerCase())),
    )
    expect(items.map((item: { id: string }) => item.id)).not.toContain(stranger.id)
    const byId = Object.fromEntries(items.map((item: { id: string }) => [item.id, item]))
    const lockedRow = await storedAccount(locked.id)
    expect(byId[member.user.id]).toEqual({
      id: member.user.id,
      email: member.user.email,
      role: 'member',
      status: 'active',
      lockedUntil: null,
      otpEnabled: false,
      passkeyCount: 1,
      createdAt: expect.any(String),
    })
    expect(byId[admin.user.id]).toMatchObject({ role: 'admin', status: 'active', passkeyCount: 0 })
    expect(byId[invited.id]).toMatchObject({ status: 'invited', lockedUntil: null })
    expect(byId[deactivated.id]).toMatchObject({ status: 'deactivated' })
    expect(byId[locked.id]).toMatchObject({
      status: 'locked',
      lockedUntil: lockedRow.locked_until?.toISOString(),
    })
  })

  it('filters by status, and shows a lock that has run out as active', async () => {
    const { admin, member } = await organization()
    const invited = await invitee(admin)
    const locked = await newUser(t.app, { organizationId: admin.user.organizationId })
    await lockOut(locked)
    const ids = async (status: string) =>
      (await list(admin.session, `?status=${status}`)).json().items.map((item: { id: string }) => item.id)
    expect(await ids('invited')).toEqual([invited.id])
    expect(await ids('locked')).toEqual([locked.id])
    expect(await ids('deactivated')).toEqual([])
    expect((await ids('active')).sort()).toEqual([admin.user.id, member.user.id].sort())

    await t.app.db
      .updateTable('accounts')
      .set({ locked_until: new Date(t.clock.now().getTime() - 1000) })
      .where('id', '=', locked.id)
      .execute()
    expect(await ids('locked')).toEqual([])
    const all = (await list(admin.session)).json().items
    expect(all.find((item: { id: string }) => item.id === locked.id)).toMatchObject({
      status: 'active',
      lockedUntil: null,
    })
  })

  it('pages with an opaque cursor: every account once, in order, and null after the last page', async () => {
    const { admin } = await organization()
    for (let i = 0; i < 5; i++) await newUser(t.app, { organizationId: admin.user.organizationId })
    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const query: string = `?limit=2${cursor ? `&cursor=${cursor}` : ''}`
      const res = await list(admin.session, query)
      expect(res.statusCode).toBe(200)
      const page = res.json()
      expect(page.items.length).toBeLessThanOrEqual(2)
      seen.push(...page.items.map((item: { email: string }) => item.email))
      cursor = page.nextCursor
      pages++
    } while (cursor)
    expect(pages).toBe(4)
    expect(seen).toHaveLength(7)
    expect(seen).toEqual([...seen].sort((a, b) => a.toLowerCase().localeCompare(b.toLowerCase())))
    expect((await list(admin.session)).json().items.map((item: { email: string }) => item.email)).toEqual(
      seen,
    )
  })

  it('answers a cursor it did not write, a status it does not know and a limit over 100 with 400', async () => {
    const { admin } = await organization()
    expectProblem(await list(admin.session, '?cursor=bm90LWEtY3Vyc29y_'), 400, 'VALIDATION_FAILED')
    expectProblem(
      await list(admin.session, `?cursor=${Buffer.from('a\u0000b').toString('base64url')}`),
      400,
      'VALIDATION_FAILED',
    )
    expectProblem(await list(admin.session, '?status=gone'), 400, 'VALIDATION_FAILED')
    expectProblem(await list(admin.session, '?limit=101'), 400, 'VALIDATION_FAILED')
  })

  it('refuses members (403), API keys (403) and the unauthenticated (401)', async () => {
    const { admin, member } = await organization()
    expectProblem(await list(member.session), 403, 'ACCESS_DENIED')
    expectProblem(await list(null), 401, 'AUTHENTICATION_REQUIRED')
    const key = await newDeliveredApiKey(t.app, admin.user.organizationId, ['config:write', 'audit:read'])
    expectProblem(
      await t.app.inject({ method: 'GET', url: '/api/users', headers: key.headers }),
      403,
      'INSUFFICIENT_SCOPE',
    )
  })
})

describe('PATCH /api/users/{id}', () => {
  const roleTuple = (operation: 'write' | 'delete', user: TestUser, relation: string) => ({
    operation,
    subject: `user:${user.id}`,
    relation,
    object: `organization:${user.organizationId}`,
  })

  it('promotes a member: the role tuple is swapped, the event recorded, the old access token refused', async () => {
    const { admin, member } = await organization()
    const res = await changeRole(admin.session, member.user.id, 'admin')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id: member.user.id, role: 'admin', status: 'active' })
    expect((await storedAccount(member.user.id)).role).toBe('admin')
    expect(await queuedChangesOf(t.app, `user:${member.user.id}`)).toEqual([
      roleTuple('write', member.user, 'member'),
      roleTuple('delete', member.user, 'member'),
      roleTuple('write', member.user, 'admin'),
    ])
    expect(await oneEvent('user.role_changed', member.user.id, res)).toMatchObject({
      organization_id: admin.user.organizationId,
      actor_type: 'user',
      actor_id: admin.user.id,
      subject_type: 'user',
      data: { from: 'member', to: 'admin' },
    })

    // Access tokens issued before the change are refused at once; the session itself goes on.
    expectProblem(await me(member.session), 401, 'AUTHENTICATION_REQUIRED')
    const renewed = await refresh(t.app, member.session)
    expect(renewed.statusCode).toBe(200)
    const access = renewed.cookies.find((c) => c.name === 'access_token')?.value ?? ''
    const promoted = { ...member.session, access }
    expect((await me(promoted)).json()).toMatchObject({ role: 'admin' })
    await t.app.authz.outbox.runOnce()
    expect((await list(promoted)).statusCode).toBe(200)
  })

  it('demotes an admin, who can no longer administer users', async () => {
    const { admin } = await organization()
    const other = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'admin' })
    const res = await changeRole(admin.session, other.user.id, 'member')
    expect(res.statusCode).toBe(200)
    expect(await oneEvent('user.role_changed', other.user.id, res)).toMatchObject({
      data: { from: 'admin', to: 'member' },
    })
    await t.app.authz.outbox.runOnce()
    const session = await signIn(t.app, other.user)
    expectProblem(await list(session), 403, 'ACCESS_DENIED')
    expectProblem(await changeRole(session, admin.user.id, 'member'), 403, 'ACCESS_DENIED')
  })

  it('answers the same role again with 200 and changes and records nothing', async () => {
    const { admin, member } = await organization()
    const res = await changeRole(admin.session, member.user.id, 'member')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id: member.user.id, role: 'member' })
    expect(await eventsOf('user.role_changed', member.user.id)).toEqual([])
    expect(await queuedChangesOf(t.app, `user:${member.user.id}`)).toHaveLength(1)
    expect((await me(member.session)).statusCode).toBe(200)
  })

  it('refuses to demote the last active admin with 409 LAST_ADMIN, and records nothing', async () => {
    const { admin } = await organization()
    expectProblem(await changeRole(admin.session, admin.user.id, 'member'), 409, 'LAST_ADMIN')
    expect((await storedAccount(admin.user.id)).role).toBe('admin')
    expect(await eventsOf('user.role_changed', admin.user.id)).toEqual([])

    // With a second admin one of them may step down, but not the one left after that.
    const second = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'admin' })
    expect((await changeRole(admin.session, admin.user.id, 'member')).statusCode).toBe(200)
    expectProblem(await changeRole(second.session, second.user.id, 'member'), 409, 'LAST_ADMIN')
    expect((await storedAccount(second.user.id)).role).toBe('admin')
  })

  it('lets only one of two admins demoting each other at once succeed: an admin remains', async () => {
    const { admin } = await organization()
    const second = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'admin' })
    const answers = await Promise.all([
      changeRole(admin.session, second.user.id, 'member'),
      changeRole(second.session, admin.user.id, 'member'),
    ])
    const statuses = answers.map((res) => res.statusCode).sort()
    expect(statuses[0]).toBe(200)
    // The loser was demoted by the winner (403, or 401 once its session version has moved on) or
    // would have demoted the last admin (409).
    expect([401, 403, 409]).toContain(statuses[1])
    const roles = [(await storedAccount(admin.user.id)).role, (await storedAccount(second.user.id)).role]
    expect(roles.sort()).toEqual(['admin', 'member'])
  })

  it('gives a deactivated account its new role without writing a role tuple it does not hold', async () => {
    const { admin } = await organization()
    const gone = await newUser(t.app, { organizationId: admin.user.organizationId })
    await as(admin.session, { method: 'POST', url: `/api/users/${gone.id}/deactivate` })
    const res = await changeRole(admin.session, gone.id, 'admin')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ role: 'admin', status: 'deactivated' })
    expect(await queuedChangesOf(t.app, `user:${gone.id}`)).toEqual([
      roleTuple('write', gone, 'member'),
      roleTuple('delete', gone, 'member'),
    ])
    // Reactivation writes the tuple of the role it has by then.
    await as(admin.session, { method: 'POST', url: `/api/users/${gone.id}/reactivate` })
    expect((await queuedChangesOf(t.app, `user:${gone.id}`)).at(-1)).toEqual(
      roleTuple('write', gone, 'admin'),
    )
  })

  it("refuses members (403), answers another organization's user with 404 and a bad role with 400", async () => {
    const { admin, member } = await organization()
    const other = await newUser(t.app, { organizationId: admin.user.organizationId })
    expectProblem(await changeRole(member.session, other.id, 'admin'), 403, 'ACCESS_DENIED')
    expectProblem(await changeRole(member.session, member.user.id, 'admin'), 403, 'ACCESS_DENIED')
    const stranger = await newUser(t.app)
    expectProblem(await changeRole(admin.session, stranger.id, 'admin'), 404, 'NOT_FOUND')
    expectProblem(await changeRole(admin.session, randomUUID(), 'admin'), 404, 'NOT_FOUND')
    expectProblem(await changeRole(admin.session, other.id, 'owner'), 400, 'VALIDATION_FAILED')
    expectProblem(await changeRole(null, other.id, 'admin'), 401, 'AUTHENTICATION_REQUIRED')
    for (const id of [other.id, member.user.id, stranger.id]) {
      expect((await storedAccount(id)).role).toBe('member')
      expect(await eventsOf('user.role_changed', id)).toEqual([])
    }
  })

  it('records nothing, and changes nothing, when the change rolls back', async () => {
    const { admin, member } = await organization()
    const restore = await failingCommit('accounts', member.user.id)
    try {
      expect((await changeRole(admin.session, member.user.id, 'admin')).statusCode).toBe(500)
    } finally {
      await restore()
    }
    expect((await storedAccount(member.user.id)).role).toBe('member')
    expect(await eventsOf('user.role_changed', member.user.id)).toEqual([])
    expect(await queuedChangesOf(t.app, `user:${member.user.id}`)).toHaveLength(1)
    expect((await me(member.session)).statusCode).toBe(200)
  })
})

describe('POST /api/users/{id}/unlock', () => {
  it('ends a lockout: the user signs in again, the event is recorded', async () => {
    const { admin } = await organization()
    const locked = await newUser(t.app, { organizationId: admin.user.organizationId })
    await lockOut(locked)
    const until = (await storedAccount(locked.id)).locked_until

    const res = await unlock(admin.session, locked.id)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id: locked.id, status: 'active', lockedUntil: null })
    expect(await storedAccount(locked.id)).toMatchObject({
      locked_until: null,
      failed_attempts: 0,
      refused_attempts: 0,
    })
    expect(await oneEvent('user.unlocked', locked.id, res)).toMatchObject({
      organization_id: admin.user.organizationId,
      actor_type: 'user',
      actor_id: admin.user.id,
      data: { lockedUntil: until?.toISOString() },
    })
    expect((await login(t.app, locked.email, locked.password)).statusCode).toBe(200)
  })

  it('answers 200 for a user who is not locked, leaving the failure count, and records nothing', async () => {
    const { admin, member } = await organization()
    await login(t.app, member.user.email, 'not the password at all')
    const res = await unlock(admin.session, member.user.id)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id: member.user.id, status: 'active', lockedUntil: null })
    expect((await storedAccount(member.user.id)).failed_attempts).toBe(1)
    expect(await eventsOf('user.unlocked', member.user.id)).toEqual([])
  })

  it("refuses members (403) and answers another organization's user with 404, unlocking neither", async () => {
    const { admin, member } = await organization()
    const locked = await newUser(t.app, { organizationId: admin.user.organizationId })
    await lockOut(locked)
    const stranger = await newUser(t.app)
    await lockOut(stranger)
    expectProblem(await unlock(member.session, locked.id), 403, 'ACCESS_DENIED')
    expectProblem(await unlock(admin.session, stranger.id), 404, 'NOT_FOUND')
    expectProblem(await unlock(null, locked.id), 401, 'AUTHENTICATION_REQUIRED')
    for (const user of [locked, stranger]) {
      expect((await storedAccount(user.id)).locked_until).not.toBeNull()
      expect(await eventsOf('user.unlocked', user.id)).toEqual([])
    }
  })

  it('records nothing, and leaves the lock, when the unlock rolls back', async () => {
    const { admin } = await organization()
    const locked = await newUser(t.app, { organizationId: admin.user.organizationId })
    await lockOut(locked)
    const restore = await failingCommit('accounts', locked.id)
    try {
      expect((await unlock(admin.session, locked.id)).statusCode).toBe(500)
    } finally {
      await restore()
    }
    expect((await storedAccount(locked.id)).locked_until).not.toBeNull()
    expect(await eventsOf('user.unlocked', locked.id)).toEqual([])
  })
})

describe('POST /api/users/{id}/resend-invitation', () => {
  it('mails a fresh invitation whose link works while the older one no longer does', async () => {
    const { admin } = await organization()
    const invited = await invitee(admin)
    await deliverMail(t)
    const first = linkToken((await mailsTo(t.smtp, invited.email))[0], '/accept-invitation')

    const res = await resend(admin.session, invited.id)
    expect(res.statusCode).toBe(202)
    expect(res.json()).toEqual({ userId: invited.id })
    expect(await oneEvent('user.invitation_resent', invited.id, res)).toMatchObject({
      organization_id: admin.user.organizationId,
      actor_type: 'user',
      actor_id: admin.user.id,
      subject_type: 'user',
    })
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, invited.email)
    expect(mails).toHaveLength(2)
    const second = linkToken(mails[1], '/accept-invitation')

    expectProblem(await confirmPassword(t.app, first, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    expect((await confirmPassword(t.app, second, NEW_PASSWORD)).statusCode).toBe(200)
    expect((await login(t.app, invited.email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('answers 409 INVALID_TRANSITION for an active, an accepted or a deactivated account, mailing nothing', async () => {
    const { admin, member } = await organization()
    const withdrawn = await invitee(admin)
    await as(admin.session, { method: 'POST', url: `/api/users/${withdrawn.id}/deactivate` })
    await deliverMail(t)
    t.smtp.clear()
    for (const id of [member.user.id, admin.user.id, withdrawn.id]) {
      expectProblem(await resend(admin.session, id), 409, 'INVALID_TRANSITION')
      expect(await eventsOf('user.invitation_resent', id)).toEqual([])
    }
    expect(await deliverMail(t)).toBe(0)
  })

  it("refuses members (403) and answers another organization's invitee with 404, mailing nothing", async () => {
    const { admin, member } = await organization()
    const invited = await invitee(admin)
    const elsewhere = await invitee(await newActor(t.app, { role: 'admin' }))
    await deliverMail(t)
    t.smtp.clear()
    expectProblem(await resend(member.session, invited.id), 403, 'ACCESS_DENIED')
    expectProblem(await resend(admin.session, elsewhere.id), 404, 'NOT_FOUND')
    expectProblem(await resend(null, invited.id), 401, 'AUTHENTICATION_REQUIRED')
    expect(await deliverMail(t)).toBe(0)
    for (const id of [invited.id, elsewhere.id])
      expect(await eventsOf('user.invitation_resent', id)).toEqual([])
  })

  it('records nothing, and the older link keeps working, when the invitation rolls back', async () => {
    const { admin } = await organization()
    const invited = await invitee(admin)
    await deliverMail(t)
    const first = linkToken((await mailsTo(t.smtp, invited.email))[0], '/accept-invitation')
    const restore = await failingCommit('one_time_tokens', invited.id)
    try {
      expect((await resend(admin.session, invited.id)).statusCode).toBe(500)
    } finally {
      await restore()
    }
    expect(await eventsOf('user.invitation_resent', invited.id)).toEqual([])
    expect(await deliverMail(t)).toBe(0)
    expect((await confirmPassword(t.app, first, NEW_PASSWORD)).statusCode).toBe(200)
  })
})

describe('POST /api/auth/password/change', () => {
  it("changes the password, ends the user's other sessions and keeps the caller's", async () => {
    const { member } = await organization()
    const other = await signIn(t.app, member.user)
    const third = await signIn(t.app, member.user)

    const res = await changePassword(member.session, PASSWORD, NEW_PASSWORD)
    expect(res.statusCode).toBe(204)
    expect(res.body).toBe('')

    // The other sessions are over, their access tokens refused at once; the caller's goes on.
    for (const ended of [other, third]) {
      expectProblem(await me(ended), 401, 'AUTHENTICATION_REQUIRED')
      expectProblem(await refresh(t.app, ended), 401, 'REFRESH_TOKEN_INVALID')
    }
    expect((await me(member.session)).statusCode).toBe(200)
    expect((await refresh(t.app, member.session)).statusCode).toBe(200)

    expectProblem(await login(t.app, member.user.email, PASSWORD), 401, 'INVALID_CREDENTIALS')
    expect((await login(t.app, member.user.email, NEW_PASSWORD)).statusCode).toBe(200)
    expect(await oneEvent('password.changed', member.user.id, res)).toMatchObject({
      organization_id: member.user.organizationId,
      actor_type: 'user',
      actor_id: member.user.id,
      subject_type: 'user',
      data: {},
    })
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, member.user.email)
    expect(mails.map((mail) => mail.subject)).toEqual(['Your password was changed'])
  })

  it('retires an outstanding reset link', async () => {
    const { member } = await organization()
    await t.app.inject({
      method: 'POST',
      url: '/api/auth/password-reset/request',
      payload: { email: member.user.email },
    })
    await deliverMail(t)
    const token = linkToken((await mailsTo(t.smtp, member.user.email))[0], '/reset-password')
    expect((await changePassword(member.session, PASSWORD, NEW_PASSWORD)).statusCode).toBe(204)
    expectProblem(await confirmPassword(t.app, token, 'yet another passphrase'), 400, 'INVALID_TOKEN')
  })

  it('answers a wrong current password with 401 INVALID_CREDENTIALS, counted toward the lockout', async () => {
    const { member } = await organization()
    const wrong = await changePassword(member.session, 'not the password at all', NEW_PASSWORD)
    expectProblem(wrong, 401, 'INVALID_CREDENTIALS')
    expect((await storedAccount(member.user.id)).failed_attempts).toBe(1)
    for (let i = 0; i < 4; i++) await changePassword(member.session, 'not the password at all', NEW_PASSWORD)
    // Locked now, as five failed sign-ins would have locked it: the right password is refused too.
    const locked = await changePassword(member.session, PASSWORD, NEW_PASSWORD)
    expectProblem(locked, 401, 'ACCOUNT_LOCKED')
    expect(Number(locked.headers['retry-after'])).toBeGreaterThan(0)
    expectProblem(await login(t.app, member.user.email, PASSWORD), 401, 'ACCOUNT_LOCKED')
    expect(await eventsOf('password.changed', member.user.id)).toEqual([])
    // The session the attempts were made from is not ended by them.
    expect((await me(member.session)).statusCode).toBe(200)
  })

  it('clears the failures a right current password follows, as a sign-in does', async () => {
    const { member } = await organization()
    await changePassword(member.session, 'not the password at all', NEW_PASSWORD)
    expect((await changePassword(member.session, PASSWORD, NEW_PASSWORD)).statusCode).toBe(204)
    expect((await storedAccount(member.user.id)).failed_attempts).toBe(0)
  })

  it('answers a new password below the policy with 400 WEAK_PASSWORD before anything is verified', async () => {
    const { member } = await organization()
    expectProblem(await changePassword(member.session, PASSWORD, 'short'), 400, 'WEAK_PASSWORD')
    expectProblem(await changePassword(member.session, 'wrong', 'short'), 400, 'WEAK_PASSWORD')
    expect((await storedAccount(member.user.id)).failed_attempts).toBe(0)
    expect((await login(t.app, member.user.email, PASSWORD)).statusCode).toBe(200)
    expect(await eventsOf('password.changed', member.user.id)).toEqual([])
  })

  it('answers 401 without a session, 403 to an API key and 400 to a body with more fields', async () => {
    expectProblem(await changePassword(null, PASSWORD, NEW_PASSWORD), 401, 'AUTHENTICATION_REQUIRED')
    const { admin } = await organization()
    const key = await newDeliveredApiKey(t.app, admin.user.organizationId, ['config:write'])
    expectProblem(
      await t.app.inject({
        method: 'POST',
        url: '/api/auth/password/change',
        headers: key.headers,
        payload: { currentPassword: PASSWORD, newPassword: NEW_PASSWORD },
      }),
      403,
      'INSUFFICIENT_SCOPE',
    )
    expectProblem(
      await as(admin.session, {
        method: 'POST',
        url: '/api/auth/password/change',
        payload: { currentPassword: PASSWORD, newPassword: NEW_PASSWORD, userId: randomUUID() },
      }),
      400,
      'VALIDATION_FAILED',
    )
  })

  it('records nothing, and keeps the old password and the other sessions, when the change rolls back', async () => {
    const { member } = await organization()
    const other = await signIn(t.app, member.user)
    // On the sessions it ends: the attempt's own statements before the transaction touch the account.
    const restore = await failingCommit('sessions', member.user.id)
    try {
      expect((await changePassword(member.session, PASSWORD, NEW_PASSWORD)).statusCode).toBe(500)
    } finally {
      await restore()
    }
    expect(await eventsOf('password.changed', member.user.id)).toEqual([])
    expect((await refresh(t.app, other)).statusCode).toBe(200)
    expect((await login(t.app, member.user.email, PASSWORD)).statusCode).toBe(200)
    expect(await deliverMail(t)).toBe(0)
  })
})
