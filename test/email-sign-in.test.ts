import { Secret, TOTP } from 'otpauth'
import { beforeEach, describe, expect, it } from 'vitest'
import { codeHash } from '../src/features/accounts/email-proofs.ts'
import {
  asUser,
  cookie,
  deliverMail,
  expectProblem,
  login,
  mailsTo,
  newUser,
  PASSWORD,
  type Session,
  signIn,
  type TestUser,
  UUID,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import {
  EMAIL_PROOF_CONFIG,
  type MailedProof,
  mailedProof,
  PAGES,
  requestEmailSignIn,
  verifyEmailSignIn,
} from './helpers/email-proofs.ts'

// Sign-in with a mailed link or code is a login: the session and cookies of login, the second
// factor where login requires it, the lockout and the login rate limits counting its attempts.

const t = useMailTestApp({
  config: { ...EMAIL_PROOF_CONFIG, 'platform.auth.rate-limit.login-per-minute': '1000' },
})

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

async function proofFor(email: string): Promise<MailedProof> {
  expect((await requestEmailSignIn(t.app, email)).statusCode).toBe(202)
  await deliverMail(t)
  return mailedProof((await mailsTo(t.smtp, email)).at(-1), PAGES.emailSignIn)
}

const codeFor = (secret: string) =>
  new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({
    timestamp: t.clock.now().getTime(),
  })

/** A user with OTP on; the clock a period on, so the next code is fresh. */
async function withOtp(): Promise<{ user: TestUser; secret: string }> {
  const user = await newUser(t.app)
  const session: Session = await signIn(t.app, user)
  const setup = await asUser(t.app, session, { method: 'POST', url: '/api/auth/otp/setup' })
  const { secret } = setup.json()
  const enabled = await asUser(t.app, session, {
    method: 'POST',
    url: '/api/auth/otp/enable',
    payload: { code: codeFor(secret) },
  })
  expect(enabled.statusCode).toBe(200)
  t.clock.advance(30_000)
  await deliverMail(t)
  t.smtp.clear()
  return { user, secret }
}

const signInEvents = (userId: string) =>
  t.app.db
    .selectFrom('audit_events')
    .select(['type', 'data'])
    .where('actor_id', '=', userId)
    .where('type', '=', 'sign_in.succeeded')
    .orderBy('sequence')
    .execute()

describe('POST /api/auth/email-sign-in/verify', () => {
  it('signs in with the link as login does: the session body, both cookies, and sign_in.succeeded with method email_link', async () => {
    const user = await newUser(t.app)
    const proof = await proofFor(user.email)
    const res = await verifyEmailSignIn(t.app, { token: proof.token })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      userId: user.id,
      organizationId: user.organizationId,
      sessionId: expect.stringMatching(UUID),
    })
    expect(cookie(res, 'access_token')).toMatchObject({ httpOnly: true, path: '/' })
    expect(cookie(res, 'refresh_token')).toMatchObject({ httpOnly: true, path: '/api/auth', sameSite: 'Lax' })
    expect(await signInEvents(user.id)).toEqual([
      { type: 'sign_in.succeeded', data: { method: 'email_link' } },
    ])
    const sessions = await asUser(
      t.app,
      {
        ...user,
        userId: user.id,
        sessionId: '',
        access: cookie(res, 'access_token')?.value ?? '',
        refresh: '',
      },
      {
        method: 'GET',
        url: '/api/auth/sessions',
      },
    )
    expect(sessions.json()[0].signInMethod).toBe('email_link')
  })

  it('signs in with the address and code from another device, recorded as email_code', async () => {
    const user = await newUser(t.app)
    const proof = await proofFor(user.email)
    expect((await verifyEmailSignIn(t.app, { email: user.email, code: proof.code })).statusCode).toBe(200)
    expect(await signInEvents(user.id)).toEqual([
      { type: 'sign_in.succeeded', data: { method: 'email_code' } },
    ])
  })

  it('mails an unknown or deactivated address a notice without link or code; its stored proof signs nothing in', async () => {
    const unknown = uniqueEmail('nobody')
    expect((await requestEmailSignIn(t.app, unknown)).statusCode).toBe(202)
    const deactivated = await newUser(t.app)
    await t.app.db
      .updateTable('accounts')
      .set({ active: false, deactivated_at: t.clock.now() })
      .where('id', '=', deactivated.id)
      .execute()
    expect((await requestEmailSignIn(t.app, deactivated.email)).statusCode).toBe(202)
    await deliverMail(t)
    for (const address of [unknown, deactivated.email]) {
      const mails = await mailsTo(t.smtp, address)
      expect(mails.map((mail) => mail.subject)).toEqual(['Sign-in attempt with your email address'])
      expect(mails[0]?.text).not.toMatch(/\d{6}|https?:/)
      // The proof stored for the notice (the same work as a real one) is refused even with its code.
      const proof = await t.app.db
        .selectFrom('email_proofs')
        .select(['id', 'token_hash', 'account_id'])
        .where('email', '=', address)
        .where('used_at', 'is', null)
        .executeTakeFirstOrThrow()
      expect(proof.account_id).toBeNull()
      await t.app.db
        .updateTable('email_proofs')
        .set({ code_hash: codeHash(proof.token_hash, '123456') })
        .where('id', '=', proof.id)
        .execute()
      expectProblem(
        await verifyEmailSignIn(t.app, { email: address, code: '123456' }),
        400,
        'EMAIL_PROOF_INVALID',
      )
    }
  })

  it('refuses a proof whose account was deactivated after it was mailed', async () => {
    const user = await newUser(t.app)
    const proof = await proofFor(user.email)
    await t.app.db
      .updateTable('accounts')
      .set({ active: false, deactivated_at: t.clock.now() })
      .where('id', '=', user.id)
      .execute()
    expectProblem(await verifyEmailSignIn(t.app, { token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
  })
})

describe('the second factor', () => {
  it('is required as at login: OTP_REQUIRED keeps the proof usable, a wrong code is INVALID_OTP, the right one signs in', async () => {
    const { user, secret } = await withOtp()
    const proof = await proofFor(user.email)
    expectProblem(await verifyEmailSignIn(t.app, { token: proof.token }), 401, 'OTP_REQUIRED')
    const wrong = codeFor(secret) === '000000' ? '000001' : '000000'
    expectProblem(await verifyEmailSignIn(t.app, { token: proof.token, otpCode: wrong }), 401, 'INVALID_OTP')
    const res = await verifyEmailSignIn(t.app, { token: proof.token, otpCode: codeFor(secret) })
    expect(res.statusCode).toBe(200)
    expect(await signInEvents(user.id)).toContainEqual({
      type: 'sign_in.succeeded',
      data: { method: 'email_link+otp' },
    })
  })

  it('with the code path too: OTP_REQUIRED spends no code attempt', async () => {
    const { user, secret } = await withOtp()
    const proof = await proofFor(user.email)
    for (let i = 0; i < 6; i++)
      expectProblem(
        await verifyEmailSignIn(t.app, { email: user.email, code: proof.code }),
        401,
        'OTP_REQUIRED',
      )
    const res = await verifyEmailSignIn(t.app, {
      email: user.email,
      code: proof.code,
      otpCode: codeFor(secret),
    })
    expect(res.statusCode).toBe(200)
  })
})

describe('lockout', () => {
  it('counts wrong codes as failed sign-ins: after five the account is locked, for the password too', async () => {
    const user = await newUser(t.app)
    const proof = await proofFor(user.email)
    const wrong = proof.code === '000000' ? '000001' : '000000'
    for (let i = 0; i < 5; i++)
      expectProblem(
        await verifyEmailSignIn(t.app, { email: user.email, code: wrong }),
        400,
        'EMAIL_PROOF_INVALID',
      )
    const locked = await login(t.app, user.email, PASSWORD)
    expectProblem(locked, 401, 'ACCOUNT_LOCKED')
    expect(Number(locked.headers['retry-after'])).toBeGreaterThan(0)
    const fresh = await proofFor(user.email)
    expectProblem(await verifyEmailSignIn(t.app, { token: fresh.token }), 401, 'ACCOUNT_LOCKED')
  })

  it('a successful email sign-in clears earlier failed passwords', async () => {
    const user = await newUser(t.app)
    for (let i = 0; i < 4; i++)
      expectProblem(await login(t.app, user.email, 'wrong password!!'), 401, 'INVALID_CREDENTIALS')
    const proof = await proofFor(user.email)
    expect((await verifyEmailSignIn(t.app, { token: proof.token })).statusCode).toBe(200)
    const row = await t.app.db
      .selectFrom('accounts')
      .select('failed_attempts')
      .where('id', '=', user.id)
      .executeTakeFirstOrThrow()
    expect(row.failed_attempts).toBe(0)
  })
})

describe('rate limits', () => {
  const limited = useMailTestApp({
    config: {
      'platform.auth.email-sign-in.enabled': 'true',
      'platform.auth.sign-up.enabled': 'true',
      'platform.auth.rate-limit.email-proof-per-hour': '2',
      'platform.auth.rate-limit.login-per-minute': '3',
    },
  })

  it('limits requests per address with 429 RATE_LIMITED and Retry-After, before anything is mailed', async () => {
    const user = await newUser(limited.app)
    for (let i = 0; i < 2; i++)
      expect((await requestEmailSignIn(limited.app, user.email)).statusCode).toBe(202)
    const res = await requestEmailSignIn(limited.app, user.email.toUpperCase())
    expectProblem(res, 429, 'RATE_LIMITED')
    expect(Number(res.headers['retry-after'])).toBeGreaterThan(0)
    await deliverMail(limited)
    expect(await mailsTo(limited.smtp, user.email)).toHaveLength(2)
    // Sign-up counts its own requests per address the same way.
    const email = uniqueEmail('founder')
    const body = { email, password: PASSWORD, organizationName: 'Acme' }
    for (let i = 0; i < 2; i++)
      expect(
        (await limited.app.inject({ method: 'POST', url: '/api/auth/sign-up', payload: body })).statusCode,
      ).toBe(202)
    expectProblem(
      await limited.app.inject({ method: 'POST', url: '/api/auth/sign-up', payload: body }),
      429,
      'RATE_LIMITED',
    )
  })

  it('counts code attempts with the login limits of the account', async () => {
    const user = await newUser(limited.app)
    for (let i = 0; i < 3; i++)
      expectProblem(
        await verifyEmailSignIn(limited.app, { email: user.email, code: '000000' }),
        400,
        'EMAIL_PROOF_INVALID',
      )
    const res = await login(limited.app, user.email, PASSWORD)
    expectProblem(res, 429, 'RATE_LIMITED')
    expect(Number(res.headers['retry-after'])).toBeGreaterThan(0)
  })
})

describe('with platform.auth.email-sign-in.enabled false (the default)', () => {
  const off = useMailTestApp()

  it('answers 404 NOT_FOUND to both endpoints and mails nothing', async () => {
    const user = await newUser(off.app)
    expectProblem(await requestEmailSignIn(off.app, user.email), 404, 'NOT_FOUND')
    expectProblem(await verifyEmailSignIn(off.app, { token: 'x' }), 404, 'NOT_FOUND')
    expect(await deliverMail(off)).toBe(0)
  })
})
