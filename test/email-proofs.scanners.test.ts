import type { LightMyRequestResponse } from 'fastify'
import { beforeEach, describe, expect, it } from 'vitest'
import {
  asUser,
  confirmPassword,
  deliverMail,
  expectProblem,
  linkToken,
  mailsTo,
  newUser,
  PASSWORD,
  requestPasswordReset,
  signIn,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import {
  appPathOf,
  EMAIL_PROOF_CONFIG,
  type MailedProof,
  mailedProof,
  PAGES,
  requestEmailSignIn,
  signUp,
  verifyEmailSignIn,
  verifySignUp,
} from './helpers/email-proofs.ts'

// Mail scanners and link previews open every link they see, once or more, before the person does.
// Opening a mailed link (GET or HEAD on the console page it names, served by the app) must use
// nothing: only the page's button, a POST to the verify endpoint, does. A proof works once; wrong
// codes end it after platform.auth.email-proof.max-attempts; it expires after
// platform.auth.email-proof.ttl.

const t = useMailTestApp({ config: EMAIL_PROOF_CONFIG, deps: { console: true } })

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

/** What a scanner does: GET twice and HEAD, each answering the console page and using nothing. */
async function scan(link: string): Promise<void> {
  const url = appPathOf(link)
  for (const method of ['GET', 'GET', 'HEAD'] as const) {
    const res = await t.app.inject({ method, url })
    expect(res.statusCode, `${method} ${url}`).toBe(200)
    expect(res.headers['content-type']).toMatch(/^text\/html/)
    expect(res.headers['cache-control']).toBe('no-store')
    expect(res.headers['set-cookie']).toBeUndefined()
  }
}

async function signUpProof(email = uniqueEmail('founder')): Promise<{ email: string; proof: MailedProof }> {
  expect((await signUp(t.app, { email, password: PASSWORD, organizationName: 'Acme' })).statusCode).toBe(202)
  await deliverMail(t)
  return { email, proof: mailedProof((await mailsTo(t.smtp, email)).at(-1), PAGES.signUp) }
}

async function signInProof(email: string): Promise<MailedProof> {
  expect((await requestEmailSignIn(t.app, email)).statusCode).toBe(202)
  await deliverMail(t)
  return mailedProof((await mailsTo(t.smtp, email)).at(-1), PAGES.emailSignIn)
}

const wrongCodeOf = (code: string) => (code === '000000' ? '111111' : '000000')

describe('opening a mailed link uses nothing', () => {
  it('sign-up: GET twice and HEAD on the link, then the POST signs up; the link and the code are then used', async () => {
    const { email, proof } = await signUpProof()
    await scan(proof.link)
    expect((await verifySignUp(t.app, { token: proof.token })).statusCode).toBe(200)
    expectProblem(await verifySignUp(t.app, { token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(await verifySignUp(t.app, { email, code: proof.code }), 400, 'EMAIL_PROOF_INVALID')
  })

  it('email sign-in: GET twice and HEAD, then the POST signs in; a replayed link or code fails', async () => {
    const user = await newUser(t.app)
    const proof = await signInProof(user.email)
    await scan(proof.link)
    expect((await verifyEmailSignIn(t.app, { token: proof.token })).statusCode).toBe(200)
    expectProblem(await verifyEmailSignIn(t.app, { token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(
      await verifyEmailSignIn(t.app, { email: user.email, code: proof.code }),
      400,
      'EMAIL_PROOF_INVALID',
    )
  })

  it('email change: GET twice and HEAD on the link to the new address, then the POST changes it once', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const newEmail = uniqueEmail('moved')
    const requested = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/account/email',
      payload: { newEmail, currentPassword: PASSWORD },
    })
    expect(requested.statusCode).toBe(202)
    await deliverMail(t)
    const proof = mailedProof((await mailsTo(t.smtp, newEmail)).at(-1), PAGES.emailChange)
    await scan(proof.link)
    const verify = (body: Record<string, unknown>) =>
      asUser(t.app, session, { method: 'POST', url: '/api/account/email/verify', payload: body })
    expect((await verify({ token: proof.token })).statusCode).toBe(204)
    expectProblem(await verify({ token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(await verify({ email: newEmail, code: proof.code }), 400, 'EMAIL_PROOF_INVALID')
  })

  it('password reset and invitation: GET twice and HEAD on the link, then the confirmation sets the password once', async () => {
    const user = await newUser(t.app)
    await requestPasswordReset(t.app, user.email)
    await deliverMail(t)
    const resetToken = linkToken((await mailsTo(t.smtp, user.email)).at(-1), '/reset-password')
    await scan(`https://app.example.test/reset-password?token=${resetToken}`)
    expect((await confirmPassword(t.app, resetToken, 'a brand new passphrase')).statusCode).toBe(200)
    expectProblem(await confirmPassword(t.app, resetToken, 'another new passphrase'), 400, 'INVALID_TOKEN')

    const admin = await newUser(t.app, { role: 'admin' })
    const adminSession = await signIn(t.app, admin)
    const invitee = uniqueEmail('invitee')
    const invited = await asUser(t.app, adminSession, {
      method: 'POST',
      url: '/api/users',
      payload: { email: invitee, organizationId: admin.organizationId },
    })
    expect(invited.statusCode).toBe(202)
    await deliverMail(t)
    const inviteToken = linkToken((await mailsTo(t.smtp, invitee)).at(-1), '/accept-invitation')
    await scan(`https://app.example.test/accept-invitation?token=${inviteToken}`)
    expect((await confirmPassword(t.app, inviteToken, 'a brand new passphrase')).statusCode).toBe(200)
    expectProblem(await confirmPassword(t.app, inviteToken, 'another new passphrase'), 400, 'INVALID_TOKEN')
  })
})

describe('wrong codes', () => {
  it('end the challenge after five: the sixth attempt fails even with the right code, and so does the link', async () => {
    const { email, proof } = await signUpProof()
    const wrong = wrongCodeOf(proof.code)
    for (let attempt = 1; attempt <= 5; attempt++) {
      expectProblem(await verifySignUp(t.app, { email, code: wrong }), 400, 'EMAIL_PROOF_INVALID')
    }
    expectProblem(await verifySignUp(t.app, { email, code: proof.code }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(await verifySignUp(t.app, { token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
  })

  it('four wrong codes leave the fifth attempt to the right one', async () => {
    const { email, proof } = await signUpProof()
    const wrong = wrongCodeOf(proof.code)
    for (let attempt = 1; attempt <= 4; attempt++) {
      expectProblem(await verifySignUp(t.app, { email, code: wrong }), 400, 'EMAIL_PROOF_INVALID')
    }
    expect((await verifySignUp(t.app, { email, code: proof.code })).statusCode).toBe(200)
  })

  it('are counted before they are compared: a burst of guesses gets no more than five compared', async () => {
    const { email, proof } = await signUpProof()
    const wrong = wrongCodeOf(proof.code)
    const burst = await Promise.all(
      Array.from({ length: 12 }, () => verifySignUp(t.app, { email, code: wrong })),
    )
    for (const res of burst) expectProblem(res, 400, 'EMAIL_PROOF_INVALID')
    const row = await t.app.db
      .selectFrom('email_proofs')
      .select('attempts')
      .where('token_hash', 'is not', null)
      .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
      .executeTakeFirstOrThrow()
    expect(row.attempts).toBe(5)
    expectProblem(await verifySignUp(t.app, { email, code: proof.code }), 400, 'EMAIL_PROOF_INVALID')
  })
})

describe('expiry', () => {
  it('a proof works until platform.auth.email-proof.ttl (15 minutes) has passed, not after', async () => {
    const user = await newUser(t.app)
    const early = await signInProof(user.email)
    t.clock.advanceSeconds(15 * 60 - 1)
    expect((await verifyEmailSignIn(t.app, { email: user.email, code: early.code })).statusCode).toBe(200)

    const late = await signInProof(user.email)
    t.clock.advanceSeconds(15 * 60)
    const expired: LightMyRequestResponse[] = [
      await verifyEmailSignIn(t.app, { token: late.token }),
      await verifyEmailSignIn(t.app, { email: user.email, code: late.code }),
    ]
    for (const res of expired) expectProblem(res, 400, 'EMAIL_PROOF_INVALID')
  })

  it('a newer request retires the older proof of the same address', async () => {
    const user = await newUser(t.app)
    const older = await signInProof(user.email)
    const newer = await signInProof(user.email)
    expectProblem(await verifyEmailSignIn(t.app, { token: older.token }), 400, 'EMAIL_PROOF_INVALID')
    expect((await verifyEmailSignIn(t.app, { token: newer.token })).statusCode).toBe(200)
  })
})
