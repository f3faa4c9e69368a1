import type { LightMyRequestResponse } from 'fastify'
import type { KyselyPlugin } from 'kysely'
import { describe, expect, it } from 'vitest'
import { counterAcceptable, PasskeyService } from '../src/features/passkeys/index.ts'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  cookie,
  expectProblem,
  newUser,
  PASSWORD,
  type Session,
  signIn,
  type TestUser,
} from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { SoftAuthenticator } from './helpers/webauthn.ts'

// Passkeys through HTTP, with a software authenticator (test/helpers/webauthn.ts) standing in for
// the browser's: registration bound to the asking session, sign-in alone or as a password login's
// second factor, and each rule the service enforces (user verification, origin, RP ID, one use of
// a challenge, its expiry and ceremony, the counter, the account's state). Chromium's virtual
// authenticator walks the same flows in test/browser.passkeys.test.ts.

const ORIGIN = 'http://localhost:8080'
const RP_ID = 'localhost'

const t = useTestApp({
  config: {
    ...ACCOUNT_TEST_CONFIG,
    'platform.auth.rate-limit.login-per-minute': '1000',
    'platform.auth.rate-limit.passkey-options-per-minute': '1000',
  },
})

const post = (url: string, payload: object, session?: Session) =>
  asUser(t.app, session ?? null, { method: 'POST', url, payload })

async function register(session: Session, authenticator: SoftAuthenticator, name?: string) {
  const options = await post('/api/auth/passkeys/registration/options', {}, session)
  expect(options.statusCode).toBe(200)
  const response = authenticator.create(options.json())
  return post('/api/auth/passkeys/registration', { response, ...(name ? { name } : {}) }, session)
}

async function signedUpWithPasskey(options: { synced?: boolean } = {}) {
  const user = await newUser(t.app)
  const session = await signIn(t.app, user)
  const authenticator = new SoftAuthenticator(ORIGIN, RP_ID, options.synced ?? true)
  const registered = await register(session, authenticator, 'Laptop')
  expect(registered.statusCode, registered.body).toBe(201)
  return { user, session, authenticator, passkey: registered.json() }
}

async function authenticationOptions(username?: string) {
  const res = await post('/api/auth/passkeys/authentication/options', username ? { username } : {})
  expect(res.statusCode).toBe(200)
  return res.json() as {
    challengeId: string
    options: { challenge: string; allowCredentials?: { id: string }[] }
  }
}

const signInWithPasskey = (challengeId: string, response: object) =>
  post('/api/auth/passkeys/authentication', { challengeId, response })

const sessionsOf = (userId: string) =>
  t.app.db.selectFrom('sessions').select(['id', 'sign_in_method']).where('user_id', '=', userId).execute()

const mailsTo = (email: string) =>
  t.app.db.selectFrom('mail_outbox').select('template').where('recipient', '=', email).execute()

describe('registering a passkey', () => {
  it('keeps a passkey whose attestation answers the session’s challenge, and says so by email', async () => {
    const { user, session, passkey } = await signedUpWithPasskey()
    expect(passkey).toMatchObject({
      name: 'Laptop',
      deviceType: 'multiDevice',
      backedUp: true,
      lastUsedAt: null,
    })
    const list = await asUser(t.app, session, { method: 'GET', url: '/api/auth/passkeys' })
    expect(list.json().items.map((p: { id: string }) => p.id)).toEqual([passkey.id])
    expect((await mailsTo(user.email)).map((m) => m.template)).toContain('passkey_added')
  })

  it('asks for a resident key and user verification, without attestation, excluding the user’s passkeys', async () => {
    const { session, authenticator } = await signedUpWithPasskey()
    const res = await post('/api/auth/passkeys/registration/options', {}, session)
    const options = res.json()
    expect(options.authenticatorSelection).toMatchObject({
      residentKey: 'required',
      userVerification: 'required',
    })
    expect(options.attestation).toBe('none')
    // EdDSA, ES256, RS256, whatever algorithms the runtime could verify.
    expect(options.pubKeyCredParams.map((p: { alg: number }) => p.alg)).toEqual([-8, -7, -257])
    expect(options.rp).toEqual({ name: 'Platform', id: RP_ID })
    expect(options.excludeCredentials.map((c: { id: string }) => c.id)).toEqual([
      authenticator.credentials[0]?.id.toString('base64url'),
    ])
  })

  it('refuses registration to anyone but a signed-in user', async () => {
    expect((await post('/api/auth/passkeys/registration/options', {})).statusCode).toBe(401)
  })

  it('refuses an answer to another session’s challenge, a replay, a missing user verification, another origin or RP ID: nothing is kept', async () => {
    const user = await newUser(t.app)
    const asking = await signIn(t.app, user)
    const other = await signIn(t.app, user)
    const authenticator = new SoftAuthenticator(ORIGIN, RP_ID)
    const options = (await post('/api/auth/passkeys/registration/options', {}, asking)).json()

    const fromOtherSession = await post(
      '/api/auth/passkeys/registration',
      { response: authenticator.create(options) },
      other,
    )
    expectProblem(fromOtherSession, 400, 'PASSKEY_REGISTRATION_FAILED')
    for (const ceremony of [
      { userVerified: false },
      { origin: 'https://evil.example' },
      { rpId: 'evil.example' },
    ]) {
      const fresh = (await post('/api/auth/passkeys/registration/options', {}, asking)).json()
      const res = await post(
        '/api/auth/passkeys/registration',
        { response: authenticator.create(fresh, ceremony) },
        asking,
      )
      expectProblem(res, 400, 'PASSKEY_REGISTRATION_FAILED')
    }
    const fresh = (await post('/api/auth/passkeys/registration/options', {}, asking)).json()
    const response = authenticator.create(fresh)
    expect((await post('/api/auth/passkeys/registration', { response }, asking)).statusCode).toBe(201)
    expectProblem(
      await post('/api/auth/passkeys/registration', { response }, asking),
      400,
      'PASSKEY_REGISTRATION_FAILED',
    )
    const list = await asUser(t.app, asking, { method: 'GET', url: '/api/auth/passkeys' })
    expect(list.json().items).toHaveLength(1)
  })

  it('refuses the same credential twice with 409 PASSKEY_EXISTS', async () => {
    const { session, authenticator } = await signedUpWithPasskey()
    const options = (await post('/api/auth/passkeys/registration/options', {}, session)).json()
    const again = authenticator.create(options, { reuse: authenticator.credentials[0] })
    expectProblem(
      await post('/api/auth/passkeys/registration', { response: again }, session),
      409,
      'PASSKEY_EXISTS',
    )
  })
})

describe('signing in with a passkey', () => {
  it('answers as a password login does: the same body, cookies and flags; the session says passkey', async () => {
    const { user, authenticator } = await signedUpWithPasskey()
    const { challengeId, options } = await authenticationOptions()
    expect(options.allowCredentials ?? []).toEqual([])
    const res = await signInWithPasskey(challengeId, authenticator.get(options))
    expect(res.statusCode, res.body).toBe(200)
    const password = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { username: user.email, password: PASSWORD },
    })
    expect(Object.keys(res.json()).sort()).toEqual(Object.keys(password.json()).sort())
    expect(res.json()).toMatchObject({ userId: user.id, organizationId: user.organizationId })
    const shape = (r: LightMyRequestResponse) =>
      r.cookies.map(({ name, path, httpOnly, secure, sameSite, maxAge }) => ({
        name,
        path,
        httpOnly,
        secure,
        sameSite,
        maxAge,
      }))
    expect(shape(res)).toEqual(shape(password))
    const access = cookie(res, 'access_token')?.value as string
    expect(
      (await t.app.inject({ method: 'GET', url: '/api/auth/sessions', cookies: { access_token: access } }))
        .statusCode,
    ).toBe(200)
    expect((await sessionsOf(user.id)).find((s) => s.id === res.json().sessionId)?.sign_in_method).toBe(
      'passkey',
    )
  })

  it('signs in username-first with the account’s passkeys allowed', async () => {
    const { user, authenticator } = await signedUpWithPasskey()
    const { challengeId, options } = await authenticationOptions(user.email.toUpperCase())
    expect(options.allowCredentials?.map((c) => c.id)).toEqual([
      authenticator.credentials[0]?.id.toString('base64url'),
    ])
    expect((await signInWithPasskey(challengeId, authenticator.get(options))).statusCode).toBe(200)
  })

  it('uses a challenge once: the replayed assertion is refused', async () => {
    const { authenticator } = await signedUpWithPasskey()
    const { challengeId, options } = await authenticationOptions()
    const assertion = authenticator.get(options)
    expect((await signInWithPasskey(challengeId, assertion)).statusCode).toBe(200)
    expectProblem(await signInWithPasskey(challengeId, assertion), 401, 'PASSKEY_CHALLENGE_INVALID')
  })

  it('reads a signature of several kilobytes (post-quantum sizes) and refuses it as a bad assertion, not a bad request', async () => {
    const { authenticator } = await signedUpWithPasskey()
    const { challengeId, options } = await authenticationOptions()
    const assertion = authenticator.get(options)
    assertion.response.signature = Buffer.alloc(2420, 7).toString('base64url')
    expectProblem(await signInWithPasskey(challengeId, assertion), 401, 'PASSKEY_INVALID')
  })

  it('refuses an expired challenge, and one of another ceremony', async () => {
    const { session, authenticator } = await signedUpWithPasskey()
    const { challengeId, options } = await authenticationOptions()
    t.clock.advanceSeconds(301)
    expectProblem(
      await signInWithPasskey(challengeId, authenticator.get(options)),
      401,
      'PASSKEY_CHALLENGE_INVALID',
    )

    const registration = (await post('/api/auth/passkeys/registration/options', {}, session)).json()
    const row = await t.app.db
      .selectFrom('passkey_challenges')
      .select('id')
      .where('challenge', '=', registration.challenge)
      .executeTakeFirstOrThrow()
    expectProblem(
      await signInWithPasskey(row.id, authenticator.get({ challenge: registration.challenge })),
      401,
      'PASSKEY_CHALLENGE_INVALID',
    )
  })

  it('refuses an assertion without user verification, from another origin or for another RP ID: no session', async () => {
    const { user, authenticator } = await signedUpWithPasskey()
    const before = (await sessionsOf(user.id)).length
    for (const ceremony of [
      { userVerified: false },
      { origin: 'https://evil.example' },
      { rpId: 'evil.example' },
    ]) {
      const { challengeId, options } = await authenticationOptions()
      expectProblem(
        await signInWithPasskey(challengeId, authenticator.get(options, ceremony)),
        401,
        'PASSKEY_INVALID',
      )
    }
    expect(await sessionsOf(user.id)).toHaveLength(before)
  })

  it('refuses another account’s passkey answering a username-first challenge', async () => {
    const first = await signedUpWithPasskey()
    const second = await signedUpWithPasskey()
    const { challengeId, options } = await authenticationOptions(first.user.email)
    expectProblem(
      await signInWithPasskey(challengeId, second.authenticator.get(options)),
      401,
      'PASSKEY_INVALID',
    )
  })

  it('refuses a deactivated account as it refuses a wrong password, and a locked one with ACCOUNT_LOCKED', async () => {
    const deactivated = await signedUpWithPasskey()
    await t.app.services.users.deactivateByOperator(deactivated.user.id)
    let { challengeId, options } = await authenticationOptions()
    expectProblem(
      await signInWithPasskey(challengeId, deactivated.authenticator.get(options)),
      401,
      'INVALID_CREDENTIALS',
    )

    const locked = await signedUpWithPasskey()
    await t.app.db
      .updateTable('accounts')
      .set({ locked_until: new Date(t.clock.now().getTime() + 60_000) })
      .where('id', '=', locked.user.id)
      .execute()
    ;({ challengeId, options } = await authenticationOptions())
    const res = await signInWithPasskey(challengeId, locked.authenticator.get(options))
    expectProblem(res, 401, 'ACCOUNT_LOCKED')
    expect(res.headers['retry-after']).toBe('60')
  })

  it('refuses a device-bound passkey whose counter goes back or stays, and accepts it moving on', async () => {
    const { authenticator } = await signedUpWithPasskey({ synced: false })
    const attempt = async (counter?: number) => {
      const { challengeId, options } = await authenticationOptions()
      return signInWithPasskey(
        challengeId,
        authenticator.get(options, counter === undefined ? {} : { counter }),
      )
    }
    expect((await attempt(5)).statusCode).toBe(200)
    expectProblem(await attempt(5), 401, 'PASSKEY_INVALID')
    expectProblem(await attempt(3), 401, 'PASSKEY_INVALID')
    expectProblem(await attempt(0), 401, 'PASSKEY_INVALID')
    expect((await attempt(6)).statusCode).toBe(200)
  })

  it('accepts a synced passkey whose counter stays 0', async () => {
    const { authenticator } = await signedUpWithPasskey({ synced: true })
    for (let i = 0; i < 3; i++) {
      const { challengeId, options } = await authenticationOptions()
      expect(
        (await signInWithPasskey(challengeId, authenticator.get(options, { counter: 0 }))).statusCode,
      ).toBe(200)
    }
  })
})

describe('a passkey as the second factor', () => {
  async function adminWithOtp() {
    const signed = await signedUpWithPasskey()
    await t.app.db
      .updateTable('accounts')
      .set({ role: 'admin', otp_enabled: true })
      .where('id', '=', signed.user.id)
      .execute()
    return signed
  }
  const login = (user: TestUser, extra: object = {}) =>
    t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { username: user.email, password: PASSWORD, ...extra },
    })

  it('lets an account with OTP on sign in with password and passkey in place of the code', async () => {
    const { user, authenticator } = await adminWithOtp()
    expectProblem(await login(user), 401, 'OTP_REQUIRED')
    const { challengeId, options } = await authenticationOptions(user.email)
    const res = await login(user, { passkey: { challengeId, response: authenticator.get(options) } })
    expect(res.statusCode, res.body).toBe(200)
    expect((await sessionsOf(user.id)).find((s) => s.id === res.json().sessionId)?.sign_in_method).toBe(
      'password+passkey',
    )
  })

  it('lets it sign in with the passkey alone, and refuses another account’s passkey as its second factor', async () => {
    const { user, authenticator } = await adminWithOtp()
    let { challengeId, options } = await authenticationOptions()
    expect((await signInWithPasskey(challengeId, authenticator.get(options))).statusCode).toBe(200)

    const stranger = await signedUpWithPasskey()
    ;({ challengeId, options } = await authenticationOptions())
    const res = await login(user, { passkey: { challengeId, response: stranger.authenticator.get(options) } })
    expectProblem(res, 401, 'PASSKEY_INVALID')
  })
})

describe('the user’s passkeys', () => {
  it('renames and removes only the user’s own (another user’s id is 404); removal is emailed', async () => {
    const mine = await signedUpWithPasskey()
    const theirs = await signedUpWithPasskey()
    const patch = (session: Session, id: string, name: string) =>
      asUser(t.app, session, { method: 'PATCH', url: `/api/auth/passkeys/${id}`, payload: { name } })
    const remove = (session: Session, id: string) =>
      asUser(t.app, session, { method: 'DELETE', url: `/api/auth/passkeys/${id}` })

    expect((await patch(mine.session, mine.passkey.id, ' Phone ')).json().name).toBe('Phone')
    expectProblem(await patch(mine.session, theirs.passkey.id, 'Mine now'), 404, 'NOT_FOUND')
    expectProblem(await patch(mine.session, mine.passkey.id, ''), 400, 'VALIDATION_FAILED')
    expectProblem(await remove(mine.session, theirs.passkey.id), 404, 'NOT_FOUND')
    expect((await remove(mine.session, mine.passkey.id)).statusCode).toBe(204)
    expect((await mailsTo(mine.user.email)).map((m) => m.template)).toContain('passkey_removed')
    const list = await asUser(t.app, theirs.session, { method: 'GET', url: '/api/auth/passkeys' })
    expect(list.json().items).toHaveLength(1)
  })

  it('removes expired challenges in housekeeping', async () => {
    await authenticationOptions()
    t.clock.advanceSeconds(301)
    await t.app.housekeeping.runOnce()
    const left = await t.app.db
      .selectFrom('passkey_challenges')
      .select('id')
      .where('expires_at', '<=', t.clock.now())
      .execute()
    expect(left).toEqual([])
  })
})

describe('no enumeration through the sign-in options', () => {
  /** The statements (their SQL, without values) the service runs for `work`. */
  async function statementsOf(work: (service: PasskeyService) => Promise<unknown>): Promise<string[]> {
    const seen: string[] = []
    const recorder: KyselyPlugin = {
      transformQuery: (args) => {
        seen.push(t.app.db.getExecutor().compileQuery(args.node, args.queryId).sql)
        return args.node
      },
      transformResult: async (args) => args.result,
    }
    await work(
      new PasskeyService({
        audit: t.app.services.audit,
        db: t.app.db.withPlugin(recorder),
        clock: t.clock,
        config: t.config,
      }),
    )
    return seen
  }

  it('runs the same statements and answers alike for an account with passkeys, one without, a deactivated one and nobody', async () => {
    const withPasskey = await signedUpWithPasskey()
    const without = await newUser(t.app)
    const deactivated = await signedUpWithPasskey()
    await t.app.services.users.deactivateByOperator(deactivated.user.id)
    const usernames = [withPasskey.user.email, without.email, deactivated.user.email, 'nobody@example.com']
    const runs = await Promise.all(usernames.map((u) => statementsOf((s) => s.authenticationOptions(u))))
    for (const run of runs) expect(run).toEqual(runs[0])

    const answers = await Promise.all(usernames.map((u) => authenticationOptions(u)))
    for (const { options } of answers) {
      expect(options.allowCredentials).toHaveLength(1)
      expect(Object.keys(options).sort()).toEqual(Object.keys(answers[0]?.options ?? {}).sort())
    }
    // A decoy is the same for one username every time, and differs between usernames.
    const again = await authenticationOptions('NOBODY@example.com')
    expect(again.options.allowCredentials).toEqual(answers[3]?.options.allowCredentials)
    expect(answers[1]?.options.allowCredentials).not.toEqual(answers[3]?.options.allowCredentials)
  })
})

describe('counterAcceptable', () => {
  it('wants a counter that moved to keep moving, and accepts one that always reports 0', () => {
    expect(counterAcceptable(0, 0)).toBe(true)
    expect(counterAcceptable(0, 1)).toBe(true)
    expect(counterAcceptable(5, 6)).toBe(true)
    expect(counterAcceptable(5, 5)).toBe(false)
    expect(counterAcceptable(5, 4)).toBe(false)
    expect(counterAcceptable(5, 0)).toBe(false)
  })
})
