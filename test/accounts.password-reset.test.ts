import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { beforeEach, describe, expect, it } from 'vitest'
import { jwtSecrets } from '../src/config.ts'
import type { PasswordResetHandler } from '../src/features/accounts/password-reset.ts'
import { MailOutboxWorker, mailOutboxBox } from '../src/mail/outbox.ts'
import { SmtpTransport } from '../src/mail/transports.ts'
import {
  ACCOUNT_TEST_CONFIG,
  confirmPassword,
  deliverMail,
  expectProblem,
  linkToken,
  login,
  mailsTo,
  newUser,
  PASSWORD,
  refresh,
  requestPasswordReset,
  signIn,
  type TestUser,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { createTestApp } from './helpers/app.ts'
import { closedPort } from './helpers/smtp.ts'

// Self-service password reset: the request answers the same
// whether or not the account exists and mails a single-use link after the response; confirm sets
// the password, clears the lockout, revokes every session and sends the password-changed notice.
// Mail survives an SMTP outage and is then delivered once.

const NEW_PASSWORD = 'a brand new passphrase'
const WRONG = 'not the password at all'
const HOUR = 3600
const CONFIG = { ...ACCOUNT_TEST_CONFIG, 'platform.auth.rate-limit.reset-per-hour': '2' }

const t = useMailTestApp({ config: CONFIG })

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

function requestReset(email: string, app: FastifyInstance = t.app) {
  return requestPasswordReset(app, email)
}

/** Requests a reset for the user and returns the token of the link that was mailed. */
async function resetToken(user: TestUser): Promise<string> {
  expect((await requestReset(user.email)).statusCode).toBe(202)
  await deliverMail(t)
  const mails = await mailsTo(t.smtp, user.email)
  return linkToken(mails.at(-1), '/reset-password')
}

const outboxFor = (email: string) =>
  t.app.db.selectFrom('mail_outbox').selectAll().where('recipient', '=', email).execute()

const withoutVolatile = (res: LightMyRequestResponse) => {
  const { date: _date, 'x-request-id': _requestId, ...rest } = res.headers
  return rest
}

describe('POST /api/auth/password-reset/request', () => {
  it('answers an existing and an unknown address identically, and mails only the existing one, once', async () => {
    const user = await newUser(t.app)
    const unknown = uniqueEmail('nobody')

    const known = await requestReset(user.email)
    const missing = await requestReset(unknown)
    expect(known.statusCode).toBe(202)
    expect(missing.statusCode).toBe(202)
    expect(known.body).toBe('{}')
    expect(missing.body).toBe(known.body)
    expect(withoutVolatile(missing)).toEqual(withoutVolatile(known))

    expect(await deliverMail(t)).toBe(1)
    const mails = await mailsTo(t.smtp, user.email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.subject).toBe('Reset your password')
    linkToken(mails[0], '/reset-password')
    expect(await mailsTo(t.smtp, unknown)).toEqual([])
    expect(await outboxFor(unknown)).toEqual([])
    expect(t.smtp.received).toHaveLength(1)
  })

  it('mails nothing for a deactivated account', async () => {
    const user = await newUser(t.app)
    await t.app.db.updateTable('accounts').set({ active: false }).where('id', '=', user.id).execute()
    expect((await requestReset(user.email)).statusCode).toBe(202)
    expect(await deliverMail(t)).toBe(0)
    expect(await mailsTo(t.smtp, user.email)).toEqual([])
    expect(await outboxFor(user.email)).toEqual([])
  })

  it('answers the third request for one address within an hour with 429 and Retry-After, known or not', async () => {
    const user = await newUser(t.app)
    for (const email of [user.email, uniqueEmail('unknown-limited')]) {
      expect((await requestReset(email)).statusCode).toBe(202)
      expect((await requestReset(email.toUpperCase())).statusCode).toBe(202)
      const limited = await requestReset(email)
      expectProblem(limited, 429, 'RATE_LIMITED')
      const retryAfter = Number(limited.headers['retry-after'])
      expect(Number.isInteger(retryAfter)).toBe(true)
      expect(retryAfter).toBeGreaterThanOrEqual(1)
      expect(retryAfter).toBeLessThanOrEqual(HOUR)
    }
    // Two emails for the two accepted requests; the refused one sent nothing.
    expect(await deliverMail(t)).toBe(2)
    expect(await mailsTo(t.smtp, user.email)).toHaveLength(2)
  })
})

describe('POST /api/auth/password-reset/confirm', () => {
  it('sets the new password, revokes every session, clears the lockout and sends the password-changed notice', async () => {
    const user = await newUser(t.app)
    const sessions = [await signIn(t.app, user), await signIn(t.app, user)]
    for (let i = 0; i < 5; i++)
      expectProblem(await login(t.app, user.email, WRONG), 401, 'INVALID_CREDENTIALS')
    expectProblem(await login(t.app, user.email, PASSWORD), 401, 'ACCOUNT_LOCKED')

    const token = await resetToken(user)
    const res = await confirmPassword(t.app, token, NEW_PASSWORD)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({})

    for (const session of sessions) expectProblem(await refresh(t.app, session), 401, 'REFRESH_TOKEN_INVALID')
    // The lockout is cleared at once: the new password works without waiting 15 minutes.
    expect((await login(t.app, user.email, NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(await login(t.app, user.email, PASSWORD), 401, 'INVALID_CREDENTIALS')

    expect(await deliverMail(t)).toBe(1)
    const subjects = (await mailsTo(t.smtp, user.email)).map((m) => m.subject)
    expect(subjects).toEqual(['Reset your password', 'Your password was changed'])
  })

  it('answers a used link with 400 INVALID_TOKEN', async () => {
    const user = await newUser(t.app)
    const token = await resetToken(user)
    expect((await confirmPassword(t.app, token, NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(await confirmPassword(t.app, token, 'yet another passphrase'), 400, 'INVALID_TOKEN')
    expect((await login(t.app, user.email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('answers a link older than an hour with 400 INVALID_TOKEN and keeps the old password', async () => {
    const user = await newUser(t.app)
    const token = await resetToken(user)
    t.clock.advanceSeconds(HOUR + 1)
    expectProblem(await confirmPassword(t.app, token, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    expect((await login(t.app, user.email, PASSWORD)).statusCode).toBe(200)
  })

  it('stops an older link from working once a newer one was used', async () => {
    const user = await newUser(t.app)
    const older = await resetToken(user)
    const newer = await resetToken(user)
    expect(newer).not.toBe(older)
    expect((await confirmPassword(t.app, newer, NEW_PASSWORD)).statusCode).toBe(200)
    expectProblem(await confirmPassword(t.app, older, 'the attacker passphrase'), 400, 'INVALID_TOKEN')
    expect((await login(t.app, user.email, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('retires the older reset links when a new reset is requested, before any is used', async () => {
    const user = await newUser(t.app)
    const older = await resetToken(user)
    const newer = await resetToken(user)
    expectProblem(await confirmPassword(t.app, older, 'the attacker passphrase'), 400, 'INVALID_TOKEN')
    expect((await confirmPassword(t.app, newer, NEW_PASSWORD)).statusCode).toBe(200)
  })

  it('answers an unknown token with 400 INVALID_TOKEN', async () => {
    expectProblem(await confirmPassword(t.app, 'no-such-token', NEW_PASSWORD), 400, 'INVALID_TOKEN')
  })
})

describe('reset mail while SMTP is down', () => {
  it('answers 202, keeps the mail unsent while SMTP is down, then delivers it exactly once', async () => {
    const down = new SmtpTransport(`smtp://127.0.0.1:${await closedPort()}`)
    // A second instance of the same deployment: the same secret, so either can open the other's mail.
    const broken = await createTestApp({
      database: t.database,
      clock: t.clock,
      config: { ...CONFIG, 'platform.auth.jwt.secret': t.config.auth.jwt.secret },
      deps: { mailTransport: down },
    })
    const user = await newUser(t.app)
    try {
      const res = await requestPasswordReset(broken.app, user.email)
      expect(res.statusCode).toBe(202)
      expect(res.json()).toEqual({})

      expect(await deliverMail(broken)).toBe(1)
      const [failed] = await outboxFor(user.email)
      expect(failed).toMatchObject({
        template: 'password_reset',
        attempts: 1,
        sent_at: null,
        failed_at: null,
      })
      expect(failed?.last_error).toMatch(/ECONNREFUSED|ESOCKET|ECONNECTION/)
      expect(t.smtp.received).toHaveLength(0)
    } finally {
      await broken.close()
      await down.close()
    }

    const live = new SmtpTransport(t.smtp.url)
    const recovered = new MailOutboxWorker({
      db: t.app.db,
      transport: live,
      clock: t.clock,
      from: t.config.mail.from,
      log: t.app.log,
      box: mailOutboxBox(jwtSecrets(t.config)),
    })
    try {
      // Not due before the back-off has passed.
      expect(await recovered.runOnce()).toBe(0)
      t.clock.advanceSeconds(5)
      expect(await recovered.runOnce()).toBe(1)
      const mails = await mailsTo(t.smtp, user.email)
      expect(mails).toHaveLength(1)
      const token = linkToken(mails[0], '/reset-password')
      expect(await outboxFor(user.email)).toEqual([
        expect.objectContaining({ attempts: 2, sent_at: t.clock.now(), last_error: null }),
      ])

      t.clock.advanceSeconds(24 * HOUR)
      expect(await recovered.runOnce()).toBe(0)
      expect(await t.app.mail.worker.runOnce()).toBe(0)
      expect(await mailsTo(t.smtp, user.email)).toHaveLength(1)
      // The link from the late delivery still works if used within the hour after it was issued;
      // a day later it has expired.
      expectProblem(await confirmPassword(t.app, token, NEW_PASSWORD), 400, 'INVALID_TOKEN')
    } finally {
      await recovered.stop()
      await live.close()
    }
  })
})

describe('password-reset handler extension point', () => {
  it('hands the request and the confirm to a supplied handler instead of the account table', async () => {
    const calls: unknown[][] = []
    const handler: PasswordResetHandler = {
      request: async (email) => {
        calls.push(['request', email])
      },
      confirm: async (proof, newPassword) => {
        calls.push(['confirm', proof, newPassword])
      },
    }
    const custom = await createTestApp({
      database: t.database,
      clock: t.clock,
      config: CONFIG,
      deps: { mailTransport: t.transport, passwordResetHandler: handler },
    })
    try {
      const user = await newUser(custom.app)
      const requested = await requestReset(user.email, custom.app)
      expect(requested.statusCode).toBe(202)
      expect(requested.json()).toEqual({})
      await custom.app.background.idle()
      expect(calls).toEqual([['request', user.email]])

      const confirmed = await confirmPassword(custom.app, 'token-from-my-own-email', NEW_PASSWORD)
      expect(confirmed.statusCode).toBe(200)
      expect(confirmed.json()).toEqual({})
      expect(calls).toEqual([
        ['request', user.email],
        ['confirm', { token: 'token-from-my-own-email' }, NEW_PASSWORD],
      ])

      // The built-in reset did nothing: no email queued, and the password is unchanged.
      expect(await outboxFor(user.email)).toEqual([])
      expect((await login(custom.app, user.email, PASSWORD)).statusCode).toBe(200)
    } finally {
      await custom.close()
    }
  })
})
