import { randomBytes } from 'node:crypto'
import { Secret, TOTP } from 'otpauth'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  asUser,
  deliverMail,
  expectProblem,
  login,
  mailsTo,
  newUser,
  type Session,
  signIn,
  type TestUser,
  useMailTestApp,
} from './helpers/accounts.ts'
import { TestDnsServer } from './helpers/dns-server.ts'
import {
  EMAIL_PROOF_CONFIG,
  mailedProof,
  PAGES,
  requestEmailSignIn,
  verifyEmailSignIn,
} from './helpers/email-proofs.ts'
import { SoftAuthenticator } from './helpers/webauthn.ts'

// `security.sso-required`: once an organization requires SSO, its members whose address is at a
// domain it verified cannot sign in by password, email code or a passkey alone (403 SSO_REQUIRED,
// only after the credentials were proved); its admins keep password + second factor; members at
// other domains and other organizations are untouched.

const dns = await TestDnsServer.start()
const t = useMailTestApp({
  config: {
    ...EMAIL_PROOF_CONFIG,
    'platform.dns.servers': dns.address,
    'platform.auth.rate-limit.passkey-options-per-minute': '1000',
  },
})
afterAll(() => dns.close())

const domain = `corp-${randomBytes(4).toString('hex')}.test`
const at = (name: string) => `${name}-${randomBytes(3).toString('hex')}@${domain}`
const ORIGIN = 'http://localhost:8080'

let admin: TestUser
let adminSecret: string
let plainAdmin: TestUser
let member: TestUser
let outsider: TestUser
let authenticator: SoftAuthenticator
let adminSession: Session

const post = (session: Session | null, url: string, payload?: object) =>
  asUser(t.app, session, { method: 'POST', url, ...(payload ? { payload } : {}) })

const otpCode = (secret: string) =>
  new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({
    timestamp: t.clock.now().getTime(),
  })

const putRequired = (value: string) =>
  asUser(t.app, adminSession, {
    method: 'PUT',
    url: `/api/organizations/${admin.organizationId}/config/security.sso-required`,
    payload: { value },
  })

const sessionCount = async () =>
  (
    await t.app.db
      .selectFrom('sessions')
      .select('id')
      .where('user_id', 'in', [member.id, plainAdmin.id])
      .execute()
  ).length

async function passkeyFirst(): Promise<ReturnType<typeof post>> {
  const options = (await post(null, '/api/auth/passkeys/authentication/options', {})).json()
  return post(null, '/api/auth/passkeys/authentication', {
    challengeId: options.challengeId,
    response: authenticator.get(options.options),
  })
}

async function emailCodeSignIn(email: string) {
  await deliverMail(t)
  t.smtp.clear()
  expect((await requestEmailSignIn(t.app, email)).statusCode).toBe(202)
  await deliverMail(t)
  const proof = mailedProof((await mailsTo(t.smtp, email)).at(-1), PAGES.emailSignIn)
  return verifyEmailSignIn(t.app, { email, code: proof.code })
}

beforeAll(async () => {
  admin = await newUser(t.app, { role: 'admin', email: at('admin') })
  const { organizationId } = admin
  plainAdmin = await newUser(t.app, { organizationId, role: 'admin', email: at('admin2') })
  member = await newUser(t.app, { organizationId, email: at('member') })
  outsider = await newUser(t.app, {
    organizationId,
    email: `contractor-${randomBytes(3).toString('hex')}@elsewhere.test`,
  })

  // Before the switch: the admin turns TOTP on, the member registers a passkey.
  adminSession = await signIn(t.app, admin)
  adminSecret = (await post(adminSession, '/api/auth/otp/setup')).json().secret
  expect((await post(adminSession, '/api/auth/otp/enable', { code: otpCode(adminSecret) })).statusCode).toBe(
    200,
  )
  t.clock.advance(31_000)
  const memberSession = await signIn(t.app, member)
  authenticator = new SoftAuthenticator(ORIGIN, 'localhost')
  const options = (await post(memberSession, '/api/auth/passkeys/registration/options', {})).json()
  const registered = await post(memberSession, '/api/auth/passkeys/registration', {
    response: authenticator.create(options),
  })
  expect(registered.statusCode, registered.body).toBe(201)
  expect((await passkeyFirst()).statusCode).toBe(200)

  // The domain is claimed and proved through the DNS server.
  const base = '/api/organizations/current/sso/domains'
  const claim = (await post(adminSession, base, { domain })).json()
  dns.publishTxt(claim.txtRecord.name, claim.txtRecord.value)
  expect((await post(adminSession, `${base}/${domain}/verify`)).json().status).toBe('verified')
})

describe('security.sso-required', () => {
  it('accepts only true or false (400 VALIDATION_FAILED otherwise)', async () => {
    for (const value of ['yes', 'TRUE', '1', ''])
      expectProblem(await putRequired(value), 400, 'VALIDATION_FAILED')
    expect((await putRequired('false')).statusCode).toBe(200)
  })

  it('refuses every other way in to a verified-domain member with 403 SSO_REQUIRED, once the credentials are proved', async () => {
    const sessionsBefore = await sessionCount()
    expect((await putRequired('true')).statusCode).toBe(200)
    expectProblem(await login(t.app, member.email, member.password), 403, 'SSO_REQUIRED')
    // A wrong password is the ordinary refusal: nothing about SSO before the credentials hold.
    expectProblem(await login(t.app, member.email, 'not the password'), 401, 'INVALID_CREDENTIALS')
    expectProblem(await emailCodeSignIn(member.email), 403, 'SSO_REQUIRED')
    t.clock.advance(1_000)
    expectProblem(await passkeyFirst(), 403, 'SSO_REQUIRED')
    // An admin without a second factor has no break-glass either.
    expectProblem(await login(t.app, plainAdmin.email, plainAdmin.password), 403, 'SSO_REQUIRED')
    expect(await sessionCount()).toBe(sessionsBefore)
  })

  it('keeps the break-glass way for admins: password and TOTP code', async () => {
    expect((await putRequired('true')).statusCode).toBe(200)
    expectProblem(await login(t.app, admin.email, admin.password), 401, 'OTP_REQUIRED')
    t.clock.advance(31_000)
    const res = await login(t.app, admin.email, admin.password, { otpCode: otpCode(adminSecret) })
    expect(res.statusCode, res.body).toBe(200)
    expect(res.json().organizationId).toBe(admin.organizationId)
  })

  it('leaves members at other domains, and everyone once it is false, signing in as before', async () => {
    expect((await putRequired('true')).statusCode).toBe(200)
    expect((await login(t.app, outsider.email, outsider.password)).statusCode).toBe(200)
    expect((await putRequired('false')).statusCode).toBe(200)
    expect((await login(t.app, member.email, member.password)).statusCode).toBe(200)
    expect((await emailCodeSignIn(member.email)).statusCode).toBe(200)
  })
})
