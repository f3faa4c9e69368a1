import { beforeEach, describe, expect, it } from 'vitest'
import {
  cookie,
  deliverMail,
  expectProblem,
  login,
  mailsTo,
  newUser,
  PASSWORD,
  UUID,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { queuedChangesOf } from './helpers/authz.ts'
import { EMAIL_PROOF_CONFIG, mailedProof, PAGES, signUp, verifySignUp } from './helpers/email-proofs.ts'

// Self-service sign-up: nothing exists until the address is proved by the mailed link or code; then
// the organization and its first admin are created together and the admin is signed in as by login.

const t = useMailTestApp({ config: EMAIL_PROOF_CONFIG })

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

const accountsWithEmail = (email: string) =>
  t.app.db
    .selectFrom('accounts')
    .selectAll()
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .execute()

async function signedUp(email = uniqueEmail('founder'), organizationName = '  Acme Ltd  ') {
  const res = await signUp(t.app, { email, password: PASSWORD, organizationName })
  expect(res.statusCode).toBe(202)
  await deliverMail(t)
  const [mail] = await mailsTo(t.smtp, email)
  return { email, proof: mailedProof(mail, PAGES.signUp) }
}

describe('POST /api/auth/sign-up', () => {
  it('answers 202 with an empty body and no cookie, creates nothing, and mails a link and a code', async () => {
    const email = uniqueEmail('founder')
    const res = await signUp(t.app, { email, password: PASSWORD, organizationName: 'Acme' })
    expect(res.statusCode).toBe(202)
    expect(res.json()).toEqual({})
    expect(res.headers['set-cookie']).toBeUndefined()
    await deliverMail(t)
    expect(await accountsWithEmail(email)).toEqual([])
    const mails = await mailsTo(t.smtp, email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.subject).toMatch(/confirm/i)
    mailedProof(mails[0], PAGES.signUp)
    // Nothing signs in before the address is proved.
    expectProblem(await login(t.app, email, PASSWORD), 401, 'INVALID_CREDENTIALS')
  })

  it('refuses a weak password, a bad address and an organization name of no or too many visible characters', async () => {
    const email = uniqueEmail('founder')
    expectProblem(
      await signUp(t.app, { email, password: 'short', organizationName: 'Acme' }),
      400,
      'WEAK_PASSWORD',
    )
    expectProblem(
      await signUp(t.app, { email: 'not-an-address', password: PASSWORD, organizationName: 'Acme' }),
      400,
      'VALIDATION_FAILED',
    )
    for (const organizationName of ['   ', 'x'.repeat(101), 'Acme\u200b', 'Ac\u0007me']) {
      expectProblem(
        await signUp(t.app, { email, password: PASSWORD, organizationName }),
        400,
        'VALIDATION_FAILED',
      )
    }
    expect(
      (await signUp(t.app, { email, password: PASSWORD, organizationName: ` ${'é'.repeat(100)} ` }))
        .statusCode,
    ).toBe(202)
  })
})

describe('POST /api/auth/sign-up/verify', () => {
  it('creates the organization and its active admin with the role tuple and audit event, and signs in as login does', async () => {
    const { email, proof } = await signedUp()
    const res = await verifySignUp(t.app, { token: proof.token })
    expect(res.statusCode).toBe(200)
    const body = res.json()
    expect(body).toEqual({
      userId: expect.stringMatching(UUID),
      organizationId: expect.stringMatching(UUID),
      sessionId: expect.stringMatching(UUID),
    })
    const access = cookie(res, 'access_token')
    const refresh = cookie(res, 'refresh_token')
    expect(access).toMatchObject({ httpOnly: true, path: '/' })
    expect(refresh).toMatchObject({ httpOnly: true, path: '/api/auth', sameSite: 'Lax' })
    expect(res.headers['cache-control']).toBe('no-store')

    const [account] = await accountsWithEmail(email)
    expect(account).toMatchObject({
      id: body.userId,
      organization_id: body.organizationId,
      role: 'admin',
      active: true,
    })
    const organization = await t.app.db
      .selectFrom('organizations')
      .selectAll()
      .where('id', '=', body.organizationId)
      .executeTakeFirstOrThrow()
    expect(organization.name).toBe('Acme Ltd')
    // Delivered at once, as the tuple outbox delivers; the change is recorded either way.
    expect(await queuedChangesOf(t.app, `user:${body.userId}`)).toEqual([
      {
        operation: 'write',
        subject: `user:${body.userId}`,
        relation: 'admin',
        object: `organization:${body.organizationId}`,
      },
    ])
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'data'])
      .where('organization_id', '=', body.organizationId)
      .orderBy('sequence')
      .execute()
    expect(events).toEqual([
      { type: 'account.signed_up', data: { method: 'email_link', role: 'admin' } },
      { type: 'sign_in.succeeded', data: { method: 'email_link' } },
    ])

    // The session works, and the password chosen at sign-up signs in.
    const me = await t.app.inject({
      method: 'GET',
      url: '/api/auth/me',
      cookies: { access_token: access?.value ?? '' },
    })
    expect(me.json()).toMatchObject({ email, role: 'admin', organizationName: 'Acme Ltd' })
    expect((await login(t.app, email, PASSWORD)).statusCode).toBe(200)
  })

  it('accepts the address and the code from any browser instead of the link', async () => {
    const { email, proof } = await signedUp()
    const res = await verifySignUp(t.app, { email: email.toUpperCase(), code: proof.code })
    expect(res.statusCode).toBe(200)
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'data'])
      .where('organization_id', '=', res.json().organizationId)
      .orderBy('sequence')
      .execute()
    expect(events.map((e) => e.data.method)).toEqual(['email_code', 'email_code'])
  })

  it('refuses a made-up token and a wrong code with EMAIL_PROOF_INVALID, and creates nothing', async () => {
    const { email, proof } = await signedUp()
    expectProblem(await verifySignUp(t.app, { token: 'made-up' }), 400, 'EMAIL_PROOF_INVALID')
    const wrong = proof.code === '000000' ? '000001' : '000000'
    expectProblem(await verifySignUp(t.app, { email, code: wrong }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(
      await verifySignUp(t.app, { email: uniqueEmail('nobody'), code: proof.code }),
      400,
      'EMAIL_PROOF_INVALID',
    )
    expect(await accountsWithEmail(email)).toEqual([])
  })

  it('keeps only the newest sign-up of an address: a second request retires the first proof', async () => {
    const email = uniqueEmail('founder')
    const first = await signedUp(email, 'First')
    t.smtp.clear()
    const second = await signedUp(email, 'Second')
    expectProblem(await verifySignUp(t.app, { token: first.proof.token }), 400, 'EMAIL_PROOF_INVALID')
    const res = await verifySignUp(t.app, { token: second.proof.token })
    expect(res.statusCode).toBe(200)
    const me = await t.app.inject({
      method: 'GET',
      url: '/api/auth/me',
      cookies: { access_token: cookie(res, 'access_token')?.value ?? '' },
    })
    expect(me.json().organizationName).toBe('Second')
  })

  it('mails an address that has an account a notice instead of a proof, and changes nothing', async () => {
    const user = await newUser(t.app)
    const before = await accountsWithEmail(user.email)
    const res = await signUp(t.app, {
      email: user.email,
      password: 'another long passphrase',
      organizationName: 'Evil',
    })
    expect(res.statusCode).toBe(202)
    await deliverMail(t)
    const mails = await mailsTo(t.smtp, user.email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.text).toMatch(/tried to sign up/)
    expect(mails[0]?.text).toMatch(/sign in, or reset your password/)
    expect(mails[0]?.text).not.toMatch(/https?:\/\/|\b\d{6}\b/)
    expect(await accountsWithEmail(user.email)).toEqual(before)
    expect((await login(t.app, user.email, PASSWORD)).statusCode).toBe(200)
  })
})

describe('with platform.auth.sign-up.enabled false (the default)', () => {
  const off = useMailTestApp()

  it('answers 404 NOT_FOUND to both endpoints and mails nothing', async () => {
    const email = uniqueEmail('founder')
    expectProblem(
      await signUp(off.app, { email, password: PASSWORD, organizationName: 'Acme' }),
      404,
      'NOT_FOUND',
    )
    expectProblem(await verifySignUp(off.app, { token: 'x' }), 404, 'NOT_FOUND')
    expect(await deliverMail(off)).toBe(0)
  })
})
