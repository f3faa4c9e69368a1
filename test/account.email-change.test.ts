import { beforeEach, describe, expect, it } from 'vitest'
import {
  asUser,
  deliverMail,
  expectProblem,
  login,
  mailsTo,
  newOrganization,
  newUser,
  PASSWORD,
  refresh,
  type Session,
  signIn,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { mailedProof, PAGES } from './helpers/email-proofs.ts'

// The signed-in user's address change: the current password to ask, a proof mailed to the new
// address to make it, a notice to the old one; a taken address is never revealed; other sessions
// end; `email.changed` is recorded.

const t = useMailTestApp()

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

const requestChange = (session: Session | null, payload: Record<string, unknown>) =>
  asUser(t.app, session, { method: 'POST', url: '/api/account/email', payload })
const verifyChange = (session: Session | null, payload: Record<string, unknown>) =>
  asUser(t.app, session, { method: 'POST', url: '/api/account/email/verify', payload })

const emailOf = async (id: string) =>
  (await t.app.db.selectFrom('accounts').select('email').where('id', '=', id).executeTakeFirstOrThrow()).email

async function asked(session: Session, newEmail = uniqueEmail('moved')) {
  const res = await requestChange(session, { newEmail, currentPassword: PASSWORD })
  expect(res.statusCode).toBe(202)
  expect(res.json()).toEqual({})
  await deliverMail(t)
  return { newEmail, proof: mailedProof((await mailsTo(t.smtp, newEmail)).at(-1), PAGES.emailChange) }
}

describe('POST /api/account/email', () => {
  it('mails a link and code to the new address and a notice to the current one, and changes nothing yet', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    await asked(session)
    const notices = await mailsTo(t.smtp, user.email)
    expect(notices).toHaveLength(1)
    expect(notices[0]?.text).toMatch(/asked to change its email address/)
    expect(notices[0]?.text).not.toMatch(/https?:\/\/|\b\d{6}\b/)
    expect(await emailOf(user.id)).toBe(user.email)
  })

  it('answers a wrong current password 401 INVALID_CREDENTIALS and mails nothing', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const newEmail = uniqueEmail('moved')
    expectProblem(
      await requestChange(session, { newEmail, currentPassword: 'not the password' }),
      401,
      'INVALID_CREDENTIALS',
    )
    await deliverMail(t)
    expect(await mailsTo(t.smtp, newEmail)).toEqual([])
  })

  it('answers an address that has an account exactly as a free one, mailing that address a notice and no proof', async () => {
    const user = await newUser(t.app)
    const other = await newUser(t.app)
    const session = await signIn(t.app, user)
    const free = await requestChange(session, { newEmail: uniqueEmail('free'), currentPassword: PASSWORD })
    const taken = await requestChange(session, { newEmail: other.email, currentPassword: PASSWORD })
    expect({ status: taken.statusCode, body: taken.body }).toEqual({
      status: free.statusCode,
      body: free.body,
    })
    const headers = (res: typeof free) =>
      Object.keys(res.headers)
        .filter((h) => !['date', 'x-request-id'].includes(h))
        .sort()
    expect(headers(taken)).toEqual(headers(free))
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, other.email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.text).toMatch(/already has an account/)
    expect(mails[0]?.text).not.toMatch(/https?:\/\/|\b\d{6}\b/)
    expect(await emailOf(user.id)).toBe(user.email)
  })

  it('is refused without a session', async () => {
    expectProblem(
      await requestChange(null, { newEmail: uniqueEmail('x'), currentPassword: PASSWORD }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
    expectProblem(await verifyChange(null, { token: 'x' }), 401, 'AUTHENTICATION_REQUIRED')
  })
})

describe('POST /api/account/email/verify', () => {
  it('moves the account to the proved address, ends the other sessions, records email.changed and tells the old address', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const other = await signIn(t.app, user)
    const { newEmail, proof } = await asked(session)
    t.smtp.clear()
    expect((await verifyChange(session, { email: newEmail, code: proof.code })).statusCode).toBe(204)
    expect(await emailOf(user.id)).toBe(newEmail)
    // The session that verified stays; the other one is over.
    expect((await refresh(t.app, session)).statusCode).toBe(200)
    expectProblem(await refresh(t.app, other), 401, 'REFRESH_TOKEN_INVALID')
    expect((await login(t.app, newEmail, PASSWORD)).statusCode).toBe(200)
    expectProblem(await login(t.app, user.email, PASSWORD), 401, 'INVALID_CREDENTIALS')
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'data', 'actor_id', 'subject_id'])
      .where('organization_id', '=', user.organizationId)
      .where('type', '=', 'email.changed')
      .execute()
    expect(events).toEqual([
      { type: 'email.changed', data: { method: 'email_code' }, actor_id: user.id, subject_id: user.id },
    ])
    await deliverMail(t)
    const notices = await mailsTo(t.smtp, user.email)
    expect(notices.map((m) => m.subject)).toEqual(['Your email address was changed'])
  })

  it("refuses another account's proof as if it did not exist, and a taken address with 409 ACCOUNT_EXISTS", async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const { newEmail, proof } = await asked(session)
    const stranger = await signIn(t.app, await newUser(t.app))
    expectProblem(await verifyChange(stranger, { token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
    // The address got an account since the request (another organization invited it, say).
    await t.app.services.users.create({
      organizationId: await newOrganization(t.app),
      email: newEmail,
      role: 'member',
      password: PASSWORD,
    })
    expectProblem(await verifyChange(session, { token: proof.token }), 409, 'ACCOUNT_EXISTS')
    expect(await emailOf(user.id)).toBe(user.email)
  })
})
