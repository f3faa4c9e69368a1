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
  type Session,
  signIn,
  type TestUser,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { EMAIL_PROOF_CONFIG, mailedProof, PAGES, signUp, verifySignUp } from './helpers/email-proofs.ts'

// One address, a sign-up and an invitation: a pending sign-up neither blocks nor captures an
// invitation, whichever comes first the address ends with one account, owned by whoever proves
// the mailbox, and an invitation is accepted only through what was mailed to the invited address.

const t = useMailTestApp({ config: EMAIL_PROOF_CONFIG })
const NEW_PASSWORD = 'the invitee chose this'

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

async function signedInAdmin(): Promise<{ admin: TestUser; session: Session }> {
  const admin = await newUser(t.app, { role: 'admin' })
  return { admin, session: await signIn(t.app, admin) }
}

const invite = (session: Session, email: string, organizationId: string) =>
  asUser(t.app, session, { method: 'POST', url: '/api/users', payload: { email, organizationId } })

const accountsWithEmail = (email: string) =>
  t.app.db
    .selectFrom('accounts')
    .select(['id', 'organization_id', 'active'])
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .execute()

async function pendingSignUp(email: string, password = 'the squatter chose this') {
  expect((await signUp(t.app, { email, password, organizationName: 'Squat' })).statusCode).toBe(202)
  await deliverMail(t)
  return mailedProof((await mailsTo(t.smtp, email)).at(-1), PAGES.signUp)
}

async function invitationToken(email: string): Promise<string> {
  await deliverMail(t)
  return linkToken((await mailsTo(t.smtp, email)).at(-1), '/accept-invitation')
}

describe('a sign-up and an invitation for one address', () => {
  it('sign-up with an address already invited: a notice, no proof, and the invitation still works', async () => {
    const { admin, session } = await signedInAdmin()
    const email = uniqueEmail('invitee')
    expect((await invite(session, email, admin.organizationId)).statusCode).toBe(202)
    const token = await invitationToken(email)
    t.smtp.clear()
    expect((await signUp(t.app, { email, password: PASSWORD, organizationName: 'Mine' })).statusCode).toBe(
      202,
    )
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.text).toMatch(/tried to sign up/)
    expect((await confirmPassword(t.app, token, NEW_PASSWORD)).statusCode).toBe(200)
    expect(await accountsWithEmail(email)).toEqual([
      expect.objectContaining({ organization_id: admin.organizationId, active: true }),
    ])
  })

  it('an unverified sign-up does not block an invitation; verifying it afterwards creates nothing and mails the owner a notice', async () => {
    const email = uniqueEmail('contested')
    const proof = await pendingSignUp(email)
    const { admin, session } = await signedInAdmin()
    const invited = await invite(session, email, admin.organizationId)
    expect(invited.statusCode).toBe(202)
    const token = await invitationToken(email)
    t.smtp.clear()
    expectProblem(await verifySignUp(t.app, { token: proof.token }), 409, 'ACCOUNT_EXISTS')
    await deliverMail(t)
    expect((await mailsTo(t.smtp, email)).map((m) => m.subject)).toEqual([
      'Sign-up attempt with your email address',
    ])
    // The sign-up's password captured nothing; the invitation is accepted and the invitee's password works.
    expectProblem(await login(t.app, email, 'the squatter chose this'), 401, 'INVALID_CREDENTIALS')
    expect((await confirmPassword(t.app, token, NEW_PASSWORD)).statusCode).toBe(200)
    expect((await login(t.app, email, NEW_PASSWORD)).json().organizationId).toBe(admin.organizationId)
    expect(await accountsWithEmail(email)).toHaveLength(1)
  })

  it('an invitation accepted first, then the pending sign-up verified by code: still one account, the invited one', async () => {
    const email = uniqueEmail('contested')
    const proof = await pendingSignUp(email)
    const { admin, session } = await signedInAdmin()
    await invite(session, email, admin.organizationId)
    expect((await confirmPassword(t.app, await invitationToken(email), NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(await verifySignUp(t.app, { email, code: proof.code }), 409, 'ACCOUNT_EXISTS')
    expect(await accountsWithEmail(email)).toEqual([
      expect.objectContaining({ organization_id: admin.organizationId, active: true }),
    ])
  })

  it('a verified sign-up, then an invitation: refused with 409 ACCOUNT_EXISTS as for any existing account', async () => {
    const email = uniqueEmail('founder')
    const proof = await pendingSignUp(email, PASSWORD)
    const verified = await verifySignUp(t.app, { token: proof.token })
    expect(verified.statusCode).toBe(200)
    const { admin, session } = await signedInAdmin()
    expectProblem(await invite(session, email, admin.organizationId), 409, 'ACCOUNT_EXISTS')
    expect(await accountsWithEmail(email)).toEqual([
      expect.objectContaining({ organization_id: verified.json().organizationId, active: true }),
    ])
  })
})

describe('accepting an invitation', () => {
  it('takes the token mailed to the invited address only: a signed-in user of that address or any other cannot accept it otherwise', async () => {
    const { admin, session } = await signedInAdmin()
    const email = uniqueEmail('invitee')
    const invited = await invite(session, email, admin.organizationId)
    const token = await invitationToken(email)
    // Being signed in (as the admin who invited, or anyone) accepts nothing: the account stays invited.
    for (const caller of [session, await signIn(t.app, await newUser(t.app))]) {
      const res = await asUser(t.app, caller, {
        method: 'POST',
        url: '/api/auth/password-reset/confirm',
        payload: { token: 'not-the-mailed-token', newPassword: NEW_PASSWORD },
      })
      expectProblem(res, 400, 'INVALID_TOKEN')
    }
    expect(await accountsWithEmail(email)).toEqual([
      expect.objectContaining({ id: invited.json().userId, active: false }),
    ])
    expect((await confirmPassword(t.app, token, NEW_PASSWORD)).statusCode).toBe(200)
  })
})
