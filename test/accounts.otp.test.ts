import { createHash } from 'node:crypto'
import { Secret, TOTP } from 'otpauth'
import { beforeEach, describe, expect, it } from 'vitest'
import type { Role } from '../src/db/schema.ts'
import {
  asUser,
  deliverMail,
  expectProblem,
  login,
  mailsTo,
  newUser,
  PASSWORD,
  type Session,
  signIn,
  type TestUser,
  useMailTestApp,
} from './helpers/accounts.ts'

// The TOTP second factor: setup, enable with
// backup codes, login with a code (once per code), backup codes, disable, and the roles that must
// keep it. Wrong codes count towards the lockout like wrong passwords.

const PERIOD_MS = 30_000
const MAX_ATTEMPTS = 5

const t = useMailTestApp()

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

/** The code an authenticator app shows for the secret at the test clock's time (plus an offset). */
function codeFor(secret: string, offsetMs = 0): string {
  const totp = new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 })
  return totp.generate({ timestamp: t.clock.now().getTime() + offsetMs })
}

/** A 6-digit code that is valid in none of the accepted periods (now, one before, one after). */
function wrongCodeFor(secret: string): string {
  const valid = new Set([-PERIOD_MS, 0, PERIOD_MS].map((offset) => codeFor(secret, offset)))
  for (let n = 0; ; n++) {
    const candidate = String(n).padStart(6, '0')
    if (!valid.has(candidate)) return candidate
  }
}

const post = (session: Session | null, url: string, payload?: object) =>
  asUser(t.app, session, { method: 'POST', url, ...(payload ? { payload } : {}) })

const setup = (session: Session) => post(session, '/api/auth/otp/setup')
const enable = (session: Session, code: string) => post(session, '/api/auth/otp/enable', { code })
const disable = (session: Session) => post(session, '/api/auth/otp/disable')

const storedAccount = (id: string) =>
  t.app.db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

interface Enrolled {
  user: TestUser
  session: Session
  secret: string
  backupCodes: string[]
}

/**
 * A signed-in user with OTP enabled and its notice delivered; the clock is then one period on, so the
 * next code is fresh.
 */
async function enrolled(role: Role = 'member'): Promise<Enrolled> {
  const user = await newUser(t.app, { role })
  const session = await signIn(t.app, user)
  const started = await setup(session)
  expect(started.statusCode).toBe(200)
  const { secret } = started.json()
  const enabled = await enable(session, codeFor(secret))
  expect(enabled.statusCode).toBe(200)
  expect(await deliverMail(t)).toBe(1)
  t.clock.advance(PERIOD_MS)
  return { user, session, secret, backupCodes: enabled.json().backupCodes }
}

describe('OTP setup and enable', () => {
  it('sets up a secret, stored encrypted, with an otpauth URI of issuer Platform and an SVG QR code', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const res = await setup(session)
    expect(res.statusCode).toBe(200)
    expect(res.headers['cache-control']).toBe('no-store')
    const body = res.json()
    expect(Object.keys(body).sort()).toEqual(['otpauthUri', 'qrCodeSvg', 'secret'])
    expect(body.secret).toMatch(/^[A-Z2-7]{32}$/)
    expect(body.otpauthUri).toMatch(/^otpauth:\/\/totp\/[^?]+\?.*\bissuer=Platform(&|$)/)
    expect(new URL(body.otpauthUri).searchParams.get('secret')).toBe(body.secret)
    expect(body.qrCodeSvg.startsWith('<svg') || body.qrCodeSvg.startsWith('<?xml')).toBe(true)

    const stored = await storedAccount(user.id)
    expect(stored.otp_secret).toEqual(expect.any(String))
    expect(stored.otp_secret).not.toContain(body.secret)
    expect(stored.otp_secret).not.toContain(body.secret.toLowerCase())
    expect(stored.otp_enabled).toBe(false)
    // Not active until enabled: login still needs no code.
    expect((await login(t.app, user.email, PASSWORD)).statusCode).toBe(200)
  })

  it('answers enable before setup with 409 OTP_NOT_SET_UP', async () => {
    const user = await newUser(t.app)
    expectProblem(await enable(await signIn(t.app, user), '123456'), 409, 'OTP_NOT_SET_UP')
  })

  it('answers enable with a wrong code with 400 INVALID_OTP and leaves OTP off', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const { secret } = (await setup(session)).json()
    expectProblem(await enable(session, wrongCodeFor(secret)), 400, 'INVALID_OTP')
    expectProblem(await enable(session, 'abcdef'), 400, 'INVALID_OTP')
    expect((await storedAccount(user.id)).otp_enabled).toBe(false)
    expect(await deliverMail(t)).toBe(0)
  })

  it('enables OTP with a valid code: 10 distinct backup codes once, and an "OTP enabled" email', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const { secret } = (await setup(session)).json()
    const res = await enable(session, codeFor(secret))
    expect(res.statusCode).toBe(200)
    expect(res.headers['cache-control']).toBe('no-store')
    const { backupCodes } = res.json()
    expect(Object.keys(res.json())).toEqual(['backupCodes'])
    expect(backupCodes).toHaveLength(10)
    expect(new Set(backupCodes).size).toBe(10)
    for (const code of backupCodes) expect(code).toEqual(expect.stringMatching(/\S{8,}/))
    expect((await storedAccount(user.id)).otp_enabled).toBe(true)

    expect(await deliverMail(t)).toBe(1)
    const [mail] = await mailsTo(t.smtp, user.email)
    expect(mail?.subject).toBe('Two-factor authentication enabled')
    expect(mail?.text).not.toContain(secret)
    for (const code of backupCodes) expect(mail?.text).not.toContain(code)

    expectProblem(await setup(session), 409, 'OTP_ALREADY_ENABLED')
    expectProblem(await enable(session, codeFor(secret, PERIOD_MS)), 409, 'OTP_ALREADY_ENABLED')
  })
})

describe('login with OTP enabled', () => {
  it('answers a login without a code with 401 OTP_REQUIRED, not counted as a failed attempt', async () => {
    const { user } = await enrolled()
    for (let i = 0; i < MAX_ATTEMPTS + 1; i++) {
      const res = await login(t.app, user.email, PASSWORD)
      expectProblem(res, 401, 'OTP_REQUIRED')
      expect(res.headers['set-cookie']).toBeUndefined()
    }
    expectProblem(await login(t.app, user.email, PASSWORD, { otpCode: '' }), 401, 'OTP_REQUIRED')
    expect(await storedAccount(user.id)).toMatchObject({ failed_attempts: 0, locked_until: null })
  })

  it('answers a wrong code with 401 INVALID_OTP and counts it: 5 wrong codes lock the account', async () => {
    const { user, secret } = await enrolled()
    for (let i = 1; i <= MAX_ATTEMPTS; i++) {
      const res = await login(t.app, user.email, PASSWORD, { otpCode: wrongCodeFor(secret) })
      expectProblem(res, 401, 'INVALID_OTP')
      expect((await storedAccount(user.id)).failed_attempts).toBe(i)
    }
    expectProblem(
      await login(t.app, user.email, PASSWORD, { otpCode: codeFor(secret) }),
      401,
      'ACCOUNT_LOCKED',
    )
  })

  it('signs in with a valid code, and refuses the same code again (no replay within its window)', async () => {
    const { user, secret } = await enrolled()
    const code = codeFor(secret)
    const res = await login(t.app, user.email, PASSWORD, { otpCode: code })
    expect(res.statusCode).toBe(200)
    expect(res.json().userId).toBe(user.id)

    t.clock.advance(5_000)
    expectProblem(await login(t.app, user.email, PASSWORD, { otpCode: code }), 401, 'INVALID_OTP')
    // The next period's code is fresh.
    t.clock.advance(PERIOD_MS)
    expect((await login(t.app, user.email, PASSWORD, { otpCode: codeFor(secret) })).statusCode).toBe(200)
  })

  it('accepts each backup code once', async () => {
    const { user, backupCodes } = await enrolled()
    const [first, second] = backupCodes
    expect((await login(t.app, user.email, PASSWORD, { otpCode: first })).statusCode).toBe(200)
    expectProblem(await login(t.app, user.email, PASSWORD, { otpCode: first }), 401, 'INVALID_OTP')
    // Written without the dash and in capitals, an unused one still works.
    const retyped = (second ?? '').replace('-', '').toUpperCase()
    expect((await login(t.app, user.email, PASSWORD, { otpCode: retyped })).statusCode).toBe(200)
  })

  it('answers a wrong password with a valid code with 401 INVALID_CREDENTIALS', async () => {
    const { user, secret } = await enrolled()
    expectProblem(
      await login(t.app, user.email, 'not the password at all', { otpCode: codeFor(secret) }),
      401,
      'INVALID_CREDENTIALS',
    )
    // The code was not spent by the failed attempt.
    expect((await login(t.app, user.email, PASSWORD, { otpCode: codeFor(secret) })).statusCode).toBe(200)
  })
})

describe('backup codes', () => {
  /** 25 symbols of Crockford's base32 (32 symbols, no i, l, o, u), in five groups of five. */
  const BACKUP_CODE = /^[0-9a-hjkmnp-tv-z]{5}(-[0-9a-hjkmnp-tv-z]{5}){4}$/
  const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

  const storedHashes = async (accountId: string) =>
    (
      await t.app.db
        .selectFrom('otp_backup_codes')
        .select(['code_hash', 'used_at'])
        .where('account_id', '=', accountId)
        .execute()
    ).map((row) => row.code_hash)

  it('issues codes of at least 112 bits: 25 symbols from a 32-symbol alphabet (125 bits)', async () => {
    const { backupCodes } = await enrolled()
    const alphabet = new Set('0123456789abcdefghjkmnpqrstvwxyz')
    expect(alphabet.size).toBe(32)
    for (const code of backupCodes) {
      expect(code).toMatch(BACKUP_CODE)
      const symbols = code.replaceAll('-', '')
      expect([...symbols].every((symbol) => alphabet.has(symbol))).toBe(true)
      expect(symbols.length * Math.log2(alphabet.size)).toBeGreaterThanOrEqual(112)
    }
  })

  it('stores neither a code nor its plain SHA-256, but a keyed hash', async () => {
    const { user, backupCodes } = await enrolled()
    const stored = await storedHashes(user.id)
    expect(stored).toHaveLength(10)
    expect(new Set(stored).size).toBe(10)
    for (const code of backupCodes) {
      const bare = code.replaceAll('-', '')
      for (const form of [code, bare, code.toUpperCase(), bare.toUpperCase()]) {
        expect(stored).not.toContain(form)
        expect(stored).not.toContain(sha256(form))
        expect(stored.some((hash) => hash.includes(form))).toBe(false)
      }
    }
  })

  it('accepts a code typed in capitals, with spaces or no separators, and with O, I or L for 0 and 1', async () => {
    const { user, backupCodes } = await enrolled()
    const withDigit = backupCodes.find((code) => /[01]/.test(code)) as string
    const others = backupCodes.filter((code) => code !== withDigit)
    const [a = '', b = '', c = ''] = others
    const typed = [
      a.toUpperCase(),
      `  ${b.replaceAll('-', ' ')} `,
      c.replaceAll('-', ''),
      withDigit.replaceAll('0', 'O').replaceAll('1', 'l').toUpperCase(),
    ]
    for (const code of typed) {
      expect((await login(t.app, user.email, PASSWORD, { otpCode: code })).statusCode, code).toBe(200)
      // Used, in any spelling.
      expectProblem(
        await login(t.app, user.email, PASSWORD, { otpCode: code.toLowerCase() }),
        401,
        'INVALID_OTP',
      )
    }
  })

  it('refuses a truncated or altered code', async () => {
    const { user, backupCodes } = await enrolled()
    const code = backupCodes[0] as string
    const last = code.at(-1) === 'a' ? 'b' : 'a'
    for (const wrong of [code.slice(0, -1), `${code.slice(0, -1)}${last}`, `${code}a`, code.slice(0, 11)]) {
      expectProblem(await login(t.app, user.email, PASSWORD, { otpCode: wrong }), 401, 'INVALID_OTP')
    }
    expect((await login(t.app, user.email, PASSWORD, { otpCode: code })).statusCode).toBe(200)
  })

  it('lets exactly one of parallel logins with the same code through', async () => {
    const { user, backupCodes } = await enrolled()
    const code = backupCodes[3] as string
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => login(t.app, user.email, PASSWORD, { otpCode: code })),
    )
    expect(answers.map((res) => res.statusCode).sort()).toEqual([200, 401, 401, 401, 401])
    for (const res of answers.filter((r) => r.statusCode === 401)) expectProblem(res, 401, 'INVALID_OTP')
    const used = await t.app.db
      .selectFrom('otp_backup_codes')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('account_id', '=', user.id)
      .where('used_at', 'is not', null)
      .executeTakeFirstOrThrow()
    expect(used.n).toBe('1')
  })
})

describe('OTP disable and required roles', () => {
  it('disables OTP for a member with an "OTP disabled" email; login then needs no code', async () => {
    const { user, session } = await enrolled()
    const res = await disable(session)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({})
    expect(await storedAccount(user.id)).toMatchObject({ otp_enabled: false, otp_secret: null })
    expect((await login(t.app, user.email, PASSWORD)).statusCode).toBe(200)

    expect(await deliverMail(t)).toBe(1)
    const subjects = (await mailsTo(t.smtp, user.email)).map((m) => m.subject)
    expect(subjects).toEqual(['Two-factor authentication enabled', 'Two-factor authentication disabled'])
  })

  it('refuses to disable OTP for an admin with 403 OTP_REQUIRED_FOR_ROLE', async () => {
    const { user, session, secret } = await enrolled('admin')
    expectProblem(await disable(session), 403, 'OTP_REQUIRED_FOR_ROLE')
    expect((await storedAccount(user.id)).otp_enabled).toBe(true)
    expectProblem(await login(t.app, user.email, PASSWORD), 401, 'OTP_REQUIRED')
    expect((await login(t.app, user.email, PASSWORD, { otpCode: codeFor(secret) })).statusCode).toBe(200)
    expect(await deliverMail(t)).toBe(0)
  })

  it('lets an admin without OTP enabled sign in without a code', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const res = await login(t.app, admin.email, PASSWORD)
    expect(res.statusCode).toBe(200)
    expect(res.json().userId).toBe(admin.id)
  })

  it('answers the OTP endpoints without a session with 401 AUTHENTICATION_REQUIRED', async () => {
    for (const url of ['/api/auth/otp/setup', '/api/auth/otp/disable']) {
      expectProblem(await post(null, url), 401, 'AUTHENTICATION_REQUIRED')
    }
    expectProblem(
      await post(null, '/api/auth/otp/enable', { code: '123456' }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
  })
})
