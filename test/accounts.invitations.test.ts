import { beforeEach, describe, expect, it } from 'vitest'
import {
  asUser,
  confirmPassword,
  deliverMail,
  expectProblem,
  FRONTEND_URL,
  linkToken,
  login,
  mailsTo,
  newOrganization,
  newUser,
  PASSWORD,
  rawMailsTo,
  type Session,
  signIn,
  type TestUser,
  UUID,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { queuedChangesOf } from './helpers/authz.ts'

// Invitations: an organization admin creates an inactive
// account with an unusable password and the invitee sets one through a single-use emailed link.

const NEW_PASSWORD = 'a brand new passphrase'
const SEVEN_DAYS = 7 * 24 * 3600

const t = useMailTestApp()

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

async function signedInAdmin(): Promise<{ admin: TestUser; session: Session }> {
  const admin = await newUser(t.app, { role: 'admin' })
  return { admin, session: await signIn(t.app, admin) }
}

function invite(session: Session | null, payload: Record<string, unknown>) {
  return asUser(t.app, session, { method: 'POST', url: '/api/users', payload })
}

const storedAccount = (id: string) =>
  t.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

const accountsWithEmail = (email: string) =>
  t.app.db
    .selectFrom('accounts')
    .select('id')
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .execute()

/** Invites a new address into a new admin's organization and returns the token of the emailed link. */
async function invited(): Promise<{ userId: string; email: string; organizationId: string; token: string }> {
  const { admin, session } = await signedInAdmin()
  const email = uniqueEmail('invitee')
  const res = await invite(session, { email, organizationId: admin.organizationId })
  expect(res.statusCode).toBe(202)
  await deliverMail(t)
  const [mail] = await mailsTo(t.smtp, email)
  return {
    userId: res.json().userId,
    email,
    organizationId: admin.organizationId,
    token: linkToken(mail, '/accept-invitation'),
  }
}

describe('POST /api/users (invitation)', () => {
  it('creates an inactive account with an unusable password, queues its member tuple and emails a link', async () => {
    const { admin, session } = await signedInAdmin()
    const email = uniqueEmail('invitee')
    const res = await invite(session, { email, organizationId: admin.organizationId })
    expect(res.statusCode).toBe(202)
    expect(res.json()).toEqual({ userId: expect.stringMatching(UUID) })
    const { userId } = res.json()

    const account = await storedAccount(userId)
    expect(account).toMatchObject({
      email,
      organization_id: admin.organizationId,
      role: 'member',
      active: false,
    })
    const tuples = await queuedChangesOf(t.app, `user:${userId}`)
    expect(tuples).toEqual([
      {
        operation: 'write',
        subject: `user:${userId}`,
        relation: 'member',
        object: `organization:${admin.organizationId}`,
      },
    ])

    expect(await deliverMail(t)).toBe(1)
    const mails = await mailsTo(t.smtp, email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.subject).toMatch(/invited/i)
    const token = linkToken(mails[0], '/accept-invitation')
    expect(token.length).toBeGreaterThanOrEqual(22)
    expect(mails[0]?.html).toContain(`${FRONTEND_URL}/accept-invitation?token=`)

    // No password matches the stored hash, the hash itself included, and it is in no email.
    for (const password of [PASSWORD, NEW_PASSWORD, account.password_hash, token]) {
      expect(await t.app.services.passwords.verify(account.password_hash, password)).toBe(false)
      expectProblem(await login(t.app, email, password), 401, 'INVALID_CREDENTIALS')
    }
    for (const raw of rawMailsTo(t.smtp, email)) expect(raw).not.toContain(account.password_hash)
  })

  it('activates the account when the invitee sets a password, which then signs in; a password-changed email follows', async () => {
    const invitation = await invited()
    const res = await confirmPassword(t.app, invitation.token, NEW_PASSWORD)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({})
    expect((await storedAccount(invitation.userId)).active).toBe(true)

    const signedIn = await login(t.app, invitation.email, NEW_PASSWORD)
    expect(signedIn.statusCode).toBe(200)
    expect(signedIn.json()).toMatchObject({
      userId: invitation.userId,
      organizationId: invitation.organizationId,
    })

    expect(await deliverMail(t)).toBe(1)
    const subjects = (await mailsTo(t.smtp, invitation.email)).map((m) => m.subject)
    expect(subjects).toEqual([expect.stringMatching(/invited/i), 'Your password was changed'])
    const hash = (await storedAccount(invitation.userId)).password_hash
    for (const raw of rawMailsTo(t.smtp, invitation.email)) {
      expect(raw).not.toContain(hash)
      expect(raw).not.toContain(NEW_PASSWORD)
    }
  })

  it('answers a second use of the same link with 400 INVALID_TOKEN', async () => {
    const invitation = await invited()
    expect((await confirmPassword(t.app, invitation.token, NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(
      await confirmPassword(t.app, invitation.token, 'another passphrase entirely'),
      400,
      'INVALID_TOKEN',
    )
    expect((await login(t.app, invitation.email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('answers a link older than 7 days with 400 INVALID_TOKEN and leaves the account inactive', async () => {
    const invitation = await invited()
    t.clock.advanceSeconds(SEVEN_DAYS + 1)
    expectProblem(await confirmPassword(t.app, invitation.token, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    expect((await storedAccount(invitation.userId)).active).toBe(false)
    expectProblem(await login(t.app, invitation.email, NEW_PASSWORD), 401, 'INVALID_CREDENTIALS')
  })

  it('resends an expired invitation when an admin resets the password of an invited account', async () => {
    const { admin, session } = await signedInAdmin()
    const email = uniqueEmail('late-invitee')
    const res = await invite(session, { email, organizationId: admin.organizationId })
    await deliverMail(t)
    const first = linkToken((await mailsTo(t.smtp, email))[0], '/accept-invitation')
    t.clock.advanceSeconds(SEVEN_DAYS + 1)
    const fresh = await signIn(t.app, admin)
    const resend = await asUser(t.app, fresh, {
      method: 'POST',
      url: `/api/users/${res.json().userId}/reset-password`,
    })
    expect(resend.statusCode).toBe(202)
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, email)
    expect(mails).toHaveLength(2)
    const second = linkToken(mails[1], '/accept-invitation')
    expect(second).not.toBe(first)
    expect((await confirmPassword(t.app, second, NEW_PASSWORD)).statusCode).toBe(200)
    expect((await login(t.app, email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('refuses a password under 12 characters with 400 WEAK_PASSWORD without using up the link', async () => {
    const invitation = await invited()
    expectProblem(await confirmPassword(t.app, invitation.token, 'short-pw'), 400, 'WEAK_PASSWORD')
    expectProblem(await confirmPassword(t.app, invitation.token, '12345678901'), 400, 'WEAK_PASSWORD')
    expect((await storedAccount(invitation.userId)).active).toBe(false)

    expect((await confirmPassword(t.app, invitation.token, NEW_PASSWORD)).statusCode).toBe(200)
    expect((await login(t.app, invitation.email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('accepts exactly one of 16 parallel uses of one link', async () => {
    const invitation = await invited()
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) => confirmPassword(t.app, invitation.token, `${NEW_PASSWORD} ${i}`)),
    )
    const accepted = results.filter((r) => r.statusCode === 200)
    expect(accepted).toHaveLength(1)
    for (const res of results.filter((r) => r.statusCode !== 200)) expectProblem(res, 400, 'INVALID_TOKEN')

    // The password that won is the one that signs in; one password-changed email is queued.
    const winner = results.indexOf(accepted[0] as (typeof results)[number])
    expect((await login(t.app, invitation.email, `${NEW_PASSWORD} ${winner}`)).statusCode).toBe(200)
    await deliverMail(t)
    const changed = (await mailsTo(t.smtp, invitation.email)).filter(
      (m) => m.subject === 'Your password was changed',
    )
    expect(changed).toHaveLength(1)
  })

  it('answers a member (not an admin) with 403 ACCESS_DENIED and creates nothing', async () => {
    const member = await newUser(t.app, { role: 'member' })
    const session = await signIn(t.app, member)
    const email = uniqueEmail('not-invited')
    const res = await invite(session, { email, organizationId: member.organizationId, role: 'admin' })
    expectProblem(res, 403, 'ACCESS_DENIED')
    expect(await accountsWithEmail(email)).toEqual([])
    expect(await deliverMail(t)).toBe(0)
  })

  it("answers an invitation into another organization's id with 403 ACCESS_DENIED", async () => {
    const { session } = await signedInAdmin()
    const otherOrganization = await newOrganization(t.app)
    const email = uniqueEmail('cross-org')
    const res = await invite(session, { email, organizationId: otherOrganization })
    expectProblem(res, 403, 'ACCESS_DENIED')
    expect(await accountsWithEmail(email)).toEqual([])
    expect(await deliverMail(t)).toBe(0)
  })

  it('answers an email that already has an account, in any letter case, with 409 ACCOUNT_EXISTS', async () => {
    const { admin, session } = await signedInAdmin()
    const existing = await newUser(t.app, { email: uniqueEmail('Existing.User') })
    for (const email of [existing.email, existing.email.toUpperCase(), ` ${existing.email.toLowerCase()} `]) {
      const res = await invite(session, { email, organizationId: admin.organizationId })
      expectProblem(res, 409, 'ACCOUNT_EXISTS')
    }
    // A pending invitation holds its address too.
    const pending = uniqueEmail('pending')
    expect((await invite(session, { email: pending, organizationId: admin.organizationId })).statusCode).toBe(
      202,
    )
    expectProblem(
      await invite(session, { email: pending.toUpperCase(), organizationId: admin.organizationId }),
      409,
      'ACCOUNT_EXISTS',
    )
    expect(await accountsWithEmail(existing.email)).toHaveLength(1)
    expect(await deliverMail(t)).toBe(1)
    expect(await mailsTo(t.smtp, existing.email)).toEqual([])
  })

  it('answers an unauthenticated caller with 401 AUTHENTICATION_REQUIRED', async () => {
    const organizationId = await newOrganization(t.app)
    const email = uniqueEmail('anonymous')
    expectProblem(await invite(null, { email, organizationId }), 401, 'AUTHENTICATION_REQUIRED')
    expect(await accountsWithEmail(email)).toEqual([])
  })
})

describe('deactivating an invited account', () => {
  /** An admin, and an address it invited, with the token of the emailed link. */
  async function invitedByAdmin() {
    const { admin, session } = await signedInAdmin()
    const email = uniqueEmail('invitee')
    const res = await invite(session, { email, organizationId: admin.organizationId })
    expect(res.statusCode).toBe(202)
    await deliverMail(t)
    const [mail] = await mailsTo(t.smtp, email)
    return {
      admin,
      session,
      email,
      userId: res.json().userId as string,
      token: linkToken(mail, '/accept-invitation'),
    }
  }

  const act = (session: Session, action: string, userId: string) =>
    asUser(t.app, session, { method: 'POST', url: `/api/users/${userId}/${action}` })

  it('retires the invitation: accepting it answers 400 INVALID_TOKEN and the invitee cannot sign in', async () => {
    const { session, email, userId, token } = await invitedByAdmin()
    expect((await act(session, 'deactivate', userId)).json()).toEqual({ userId, active: false })

    expectProblem(await confirmPassword(t.app, token, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    expectProblem(await login(t.app, email, NEW_PASSWORD), 401, 'INVALID_CREDENTIALS')
    const account = await storedAccount(userId)
    expect(account.active).toBe(false)
    expect(account.deactivated_at).not.toBeNull()
    const outstanding = await t.app.db
      .selectFrom('one_time_tokens')
      .select('id')
      .where('account_id', '=', userId)
      .where('used_at', 'is', null)
      .execute()
    expect(outstanding).toEqual([])
  })

  it('removes the role tuple the invitation wrote', async () => {
    const { admin, session, userId } = await invitedByAdmin()
    await act(session, 'deactivate', userId)
    const tuple = {
      subject: `user:${userId}`,
      relation: 'member',
      object: `organization:${admin.organizationId}`,
    }
    expect(await queuedChangesOf(t.app, `user:${userId}`)).toEqual([
      { operation: 'write', ...tuple },
      { operation: 'delete', ...tuple },
    ])
  })

  it('sends no invitation to a deactivated invitee on admin reset; after reactivation a fresh one works', async () => {
    const { session, email, userId, token } = await invitedByAdmin()
    await act(session, 'deactivate', userId)
    t.smtp.clear()
    expect((await act(session, 'reset-password', userId)).statusCode).toBe(202)
    expect(await deliverMail(t)).toBe(0)

    // Back to invited, not active: it becomes active only through a new invitation.
    expect((await act(session, 'reactivate', userId)).json()).toEqual({ userId, active: false })
    expectProblem(await confirmPassword(t.app, token, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    expect((await act(session, 'reset-password', userId)).statusCode).toBe(202)
    await deliverMail(t)
    const fresh = linkToken((await mailsTo(t.smtp, email)).at(-1), '/accept-invitation')
    expect((await confirmPassword(t.app, fresh, NEW_PASSWORD)).statusCode).toBe(200)
    expect((await login(t.app, email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('keeps only the latest invitation link working when one is resent', async () => {
    const { session, email, userId, token } = await invitedByAdmin()
    expect((await act(session, 'reset-password', userId)).statusCode).toBe(202)
    await deliverMail(t)
    const latest = linkToken((await mailsTo(t.smtp, email)).at(-1), '/accept-invitation')
    expect(latest).not.toBe(token)
    expectProblem(await confirmPassword(t.app, token, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    expect((await confirmPassword(t.app, latest, NEW_PASSWORD)).statusCode).toBe(200)
  })
})
