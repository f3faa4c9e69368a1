import { beforeEach, describe, expect, it } from 'vitest'
import {
  asUser,
  deliverMail,
  expectProblem,
  login,
  mailsTo,
  newUser,
  PASSWORD,
  requestPasswordReset,
  signIn,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { type MailedProof, mailedProof } from './helpers/email-proofs.ts'

// Invitation and password-reset mails carry a six-digit code beside their link, as every mailed
// proof does: POST /api/auth/password-reset/confirm takes {token, newPassword} or
// {email, code, newPassword}. The code works from any browser for platform.auth.email-proof.ttl;
// wrong codes are counted before they are compared and five of them spend the link too.

const t = useMailTestApp()
const NEW_PASSWORD = 'a brand new passphrase'

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

const confirm = (payload: Record<string, unknown>) =>
  t.app.inject({ method: 'POST', url: '/api/auth/password-reset/confirm', payload })

const wrongCodeOf = (code: string) => (code === '000000' ? '111111' : '000000')

async function resetProof(email: string): Promise<MailedProof> {
  expect((await requestPasswordReset(t.app, email)).statusCode).toBe(202)
  await t.app.background.idle()
  await deliverMail(t)
  return mailedProof((await mailsTo(t.smtp, email)).at(-1), '/reset-password')
}

async function invite(): Promise<{ email: string; proof: MailedProof }> {
  const admin = await newUser(t.app, { role: 'admin' })
  const session = await signIn(t.app, admin)
  const email = uniqueEmail('invitee')
  const invited = await asUser(t.app, session, {
    method: 'POST',
    url: '/api/users',
    payload: { email, organizationId: admin.organizationId },
  })
  expect(invited.statusCode).toBe(202)
  await deliverMail(t)
  return { email, proof: mailedProof((await mailsTo(t.smtp, email)).at(-1), '/accept-invitation') }
}

describe('the code of a reset mail', () => {
  it('sets the password without the link, once; the link is then spent too', async () => {
    const user = await newUser(t.app)
    const proof = await resetProof(user.email)
    // No cookie, no link: another device with only the address and the code.
    expect(
      (await confirm({ email: user.email.toUpperCase(), code: proof.code, newPassword: NEW_PASSWORD }))
        .statusCode,
    ).toBe(200)
    expect((await login(t.app, user.email, NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(
      await confirm({ email: user.email, code: proof.code, newPassword: 'yet another passphrase' }),
      400,
      'INVALID_TOKEN',
    )
    expectProblem(
      await confirm({ token: proof.token, newPassword: 'yet another passphrase' }),
      400,
      'INVALID_TOKEN',
    )
  })

  it('five wrong codes end it: the sixth attempt fails with the right code, and so does the link', async () => {
    const user = await newUser(t.app)
    const proof = await resetProof(user.email)
    const wrong = wrongCodeOf(proof.code)
    const burst = await Promise.all(
      Array.from({ length: 8 }, () => confirm({ email: user.email, code: wrong, newPassword: NEW_PASSWORD })),
    )
    for (const res of burst) expectProblem(res, 400, 'INVALID_TOKEN')
    const row = await t.app.db
      .selectFrom('one_time_tokens')
      .innerJoin('accounts', 'accounts.id', 'one_time_tokens.account_id')
      .select('attempts')
      .where('accounts.email', '=', user.email)
      .where('one_time_tokens.used_at', 'is', null)
      .executeTakeFirstOrThrow()
    expect(row.attempts).toBe(5)
    expectProblem(
      await confirm({ email: user.email, code: proof.code, newPassword: NEW_PASSWORD }),
      400,
      'INVALID_TOKEN',
    )
    expectProblem(await confirm({ token: proof.token, newPassword: NEW_PASSWORD }), 400, 'INVALID_TOKEN')
    expect((await login(t.app, user.email, PASSWORD)).statusCode).toBe(200)
  })

  it('four wrong codes leave the fifth attempt to the right one', async () => {
    const user = await newUser(t.app)
    const proof = await resetProof(user.email)
    for (let attempt = 1; attempt <= 4; attempt++) {
      expectProblem(
        await confirm({ email: user.email, code: wrongCodeOf(proof.code), newPassword: NEW_PASSWORD }),
        400,
        'INVALID_TOKEN',
      )
    }
    expect(
      (await confirm({ email: user.email, code: proof.code, newPassword: NEW_PASSWORD })).statusCode,
    ).toBe(200)
  })

  it("an unknown address, another account's code and a wrong code answer alike", async () => {
    const user = await newUser(t.app)
    const other = await newUser(t.app)
    const proof = await resetProof(user.email)
    const answers = [
      await confirm({ email: uniqueEmail('nobody'), code: proof.code, newPassword: NEW_PASSWORD }),
      await confirm({ email: other.email, code: proof.code, newPassword: NEW_PASSWORD }),
      await confirm({ email: user.email, code: wrongCodeOf(proof.code), newPassword: NEW_PASSWORD }),
    ]
    for (const res of answers) {
      expect(res.statusCode).toBe(400)
      expect(res.json()).toEqual(answers[0]?.json())
    }
  })

  it('lasts platform.auth.email-proof.ttl (15 minutes); the link keeps its own lifetime', async () => {
    const user = await newUser(t.app)
    const proof = await resetProof(user.email)
    t.clock.advanceSeconds(15 * 60)
    expectProblem(
      await confirm({ email: user.email, code: proof.code, newPassword: NEW_PASSWORD }),
      400,
      'INVALID_TOKEN',
    )
    expect((await confirm({ token: proof.token, newPassword: NEW_PASSWORD })).statusCode).toBe(200)
  })

  it("a new request retires the older mail's code", async () => {
    const user = await newUser(t.app)
    const older = await resetProof(user.email)
    const newer = await resetProof(user.email)
    expectProblem(
      await confirm({ email: user.email, code: older.code, newPassword: NEW_PASSWORD }),
      400,
      'INVALID_TOKEN',
    )
    expect(
      (await confirm({ email: user.email, code: newer.code, newPassword: NEW_PASSWORD })).statusCode,
    ).toBe(200)
  })

  it('refuses a body with both the token and the code, or a code that is not six digits', async () => {
    const user = await newUser(t.app)
    const proof = await resetProof(user.email)
    expectProblem(
      await confirm({ token: proof.token, email: user.email, code: proof.code, newPassword: NEW_PASSWORD }),
      400,
      'VALIDATION_FAILED',
    )
    expectProblem(
      await confirm({ email: user.email, code: '12345', newPassword: NEW_PASSWORD }),
      400,
      'VALIDATION_FAILED',
    )
    expect((await confirm({ token: proof.token, newPassword: NEW_PASSWORD })).statusCode).toBe(200)
  })
})

describe('the code of an invitation mail', () => {
  it('accepts the invitation from any browser and records invitation.accepted', async () => {
    const { email, proof } = await invite()
    expect((await confirm({ email, code: proof.code, newPassword: NEW_PASSWORD })).statusCode).toBe(200)
    const session = await login(t.app, email, NEW_PASSWORD)
    expect(session.statusCode).toBe(200)
    const account = await t.app.db
      .selectFrom('accounts')
      .select('id')
      .where('email', '=', email)
      .executeTakeFirstOrThrow()
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['actor_id', 'subject_id'])
      .where('subject_id', '=', account.id)
      .where('type', '=', 'invitation.accepted')
      .execute()
    expect(events).toEqual([{ actor_id: account.id, subject_id: account.id }])
    expectProblem(
      await confirm({ token: proof.token, newPassword: 'yet another passphrase' }),
      400,
      'INVALID_TOKEN',
    )
  })
})
