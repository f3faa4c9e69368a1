import { createHmac, randomBytes, randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { SessionVersionProvider } from '../src/features/sessions/session-version.ts'
import { keyId } from '../src/security/tokens.ts'
import { cookie, newUser, PASSWORD } from './helpers/accounts.ts'
import { buildAppBeside, configErrorOf, testConfig, useTestApp, useTestAppBeside } from './helpers/app.ts'

// Every way an access cookie can be forged or stale must end in 401 on a protected route. Forged
// tokens are built by hand with node:crypto, so the checks do not depend on the signer under test.

const PROTECTED = '/api/auth/sessions'

interface Session {
  userId: string
  organizationId: string
  sessionId: string
  accessToken: string
}

const b64url = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url')

function signed(header: object, payload: object, key: Buffer, hmac = 'sha256'): string {
  const input = `${b64url(header)}.${b64url(payload)}`
  return `${input}.${createHmac(hmac, key).update(input).digest('base64url')}`
}

async function login(app: FastifyInstance, email: string): Promise<Session> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: { username: email, password: PASSWORD },
  })
  expect(res.statusCode).toBe(200)
  const accessToken = cookie(res, 'access_token')?.value
  expect(accessToken).toBeTruthy()
  return { ...res.json(), accessToken: accessToken as string }
}

const callWith = (app: FastifyInstance, token: string) =>
  app.inject({ method: 'GET', url: PROTECTED, cookies: { access_token: token } })

async function expectRejected(app: FastifyInstance, token: string): Promise<void> {
  const res = await callWith(app, token)
  expect(res.statusCode).toBe(401)
  expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
}

async function expectAccepted(app: FastifyInstance, token: string): Promise<void> {
  const res = await callWith(app, token)
  expect(res.statusCode).toBe(200)
}

const t = useTestApp()
const secret = () => Buffer.from(t.config.auth.jwt.secret, 'base64')

describe('access token verification', () => {
  const email = 'jwt.user@example.com'
  let session: Session
  // The header the service signs with; its kid names the key, so it is known once the app is.
  let HS256: Record<string, string> = {}

  beforeAll(async () => {
    await newUser(t.app, { email })
    session = await login(t.app, email)
    HS256 = { alg: 'HS256', typ: 'JWT', kid: keyId(secret()) }
  })

  /** Claims the service would issue for the session now; tests change one thing at a time. */
  const claims = (overrides: Record<string, unknown> = {}) => {
    const iat = Math.floor(t.clock.now().getTime() / 1000)
    return {
      sub: session.userId,
      sid: session.sessionId,
      org: session.organizationId,
      ver: 0,
      iss: t.config.auth.jwt.issuer,
      aud: t.config.auth.jwt.userAudience,
      iat,
      exp: iat + 720,
      ...overrides,
    }
  }
  it('accepts the access token set by login', async () => {
    await expectAccepted(t.app, session.accessToken)
  })

  it('accepts a hand-signed HS256 token with the right claims (the forgeries below differ in one thing)', async () => {
    await expectAccepted(t.app, signed(HS256, claims(), secret()))
  })

  it('rejects a request without an access cookie', async () => {
    const res = await t.app.inject({ method: 'GET', url: PROTECTED })
    expect(res.statusCode).toBe(401)
    expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
  })

  it('rejects an unsigned token with alg "none"', async () => {
    const header = { alg: 'none', typ: 'JWT' }
    await expectRejected(t.app, `${b64url(header)}.${b64url(claims())}.`)
    // Some libraries accept "none" with any signature part; the signature must not matter.
    const withSignature = signed(HS256, claims(), secret()).split('.')[2]
    await expectRejected(t.app, `${b64url(header)}.${b64url(claims())}.${withSignature}`)
  })

  it('rejects a token signed with HS512 or HS384, even with the right secret', async () => {
    await expectRejected(t.app, signed({ alg: 'HS512', typ: 'JWT' }, claims(), secret(), 'sha512'))
    await expectRejected(t.app, signed({ alg: 'HS384', typ: 'JWT' }, claims(), secret(), 'sha384'))
  })

  it('rejects a token whose HS256 header is kept but whose signature was made with another algorithm', async () => {
    await expectRejected(t.app, signed(HS256, claims(), secret(), 'sha512'))
  })

  it('rejects a token with a tampered signature', async () => {
    const [header, payload, signature] = session.accessToken.split('.') as [string, string, string]
    const bytes = Buffer.from(signature, 'base64url')
    bytes[0] = (bytes[0] as number) ^ 0x01
    await expectRejected(t.app, `${header}.${payload}.${bytes.toString('base64url')}`)
  })

  it('rejects a token whose payload was changed (another sub) under the original signature', async () => {
    const [header, payload, signature] = session.accessToken.split('.') as [string, string, string]
    const original = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'))
    expect(original.sub).toBe(session.userId)
    const tampered = b64url({ ...original, sub: randomUUID() })
    await expectRejected(t.app, `${header}.${tampered}.${signature}`)
  })

  it('rejects a token signed with another secret', async () => {
    await expectRejected(t.app, signed(HS256, claims(), randomBytes(32)))
  })

  it('rejects a token from another issuer', async () => {
    await expectRejected(t.app, signed(HS256, claims({ iss: 'someone-else' }), secret()))
  })

  it('rejects a token for another audience', async () => {
    await expectRejected(t.app, signed(HS256, claims({ aud: 'another-audience' }), secret()))
  })

  it('rejects a service-account token (service audience) presented as the access cookie', async () => {
    const service = t.app.services.tokens.issueServiceToken({ sub: randomUUID(), cid: 'backend', scope: '' })
    await expectRejected(t.app, service.token)
    // The same claims with the user audience would have passed the signature check: only aud differs.
    await expectRejected(t.app, signed(HS256, claims({ aud: t.config.auth.jwt.serviceAudience }), secret()))
  })

  it('rejects garbage in the access cookie', async () => {
    for (const token of ['not-a-jwt', 'a.b.c', '...', session.accessToken.split('.').slice(0, 2).join('.')]) {
      await expectRejected(t.app, token)
    }
  })

  it('rejects a token once it has expired (720 s), and accepts it until then', async () => {
    const fresh = await login(t.app, email)
    t.clock.advanceSeconds(719)
    await expectAccepted(t.app, fresh.accessToken)
    t.clock.advanceSeconds(2)
    await expectRejected(t.app, fresh.accessToken)
  })

  it('rejects a hand-signed token whose exp has passed', async () => {
    const iat = Math.floor(t.clock.now().getTime() / 1000) - 800
    await expectRejected(t.app, signed(HS256, claims({ iat, exp: iat + 720 }), secret()))
  })

  it('names its key in the header: kid', () => {
    const header = JSON.parse(
      Buffer.from(session.accessToken.split('.')[0] as string, 'base64url').toString(),
    )
    expect(header).toEqual({ alg: 'HS256', typ: 'JWT', kid: keyId(secret()) })
    expect(header.kid).not.toContain(t.config.auth.jwt.secret.slice(0, 8))
  })

  it('rejects a token without a kid or with an unknown one, even when its signature is right', async () => {
    await expectRejected(t.app, signed({ alg: 'HS256', typ: 'JWT' }, claims(), secret()))
    await expectRejected(t.app, signed({ ...HS256, kid: 'someone-elses' }, claims(), secret()))
  })

  it('rejects forged header spellings naming the key, and still accepts the real one after them', async () => {
    // A header with extra members still names the key: it must fail on its signature, and 40 of
    // them (each a new token for the verified-token cache) change nothing for a real token.
    for (let i = 0; i < 40; i++) {
      const header = { ...HS256, x: i }
      const forged = `${b64url(header)}.${signed(HS256, claims(), secret()).split('.').slice(1).join('.')}`
      await expectRejected(t.app, forged)
    }
    await expectAccepted(t.app, signed(HS256, claims(), secret()))
    // A service-audience token carries the same header (same key): the user verifier refuses it.
    await expectRejected(t.app, signed(HS256, claims({ aud: t.config.auth.jwt.serviceAudience }), secret()))
  })

  it('rejects iat or nbf more than 60 s ahead, and accepts them up to 60 s ahead (clock skew)', async () => {
    const now = Math.floor(t.clock.now().getTime() / 1000)
    await expectAccepted(t.app, signed(HS256, claims({ iat: now + 59, exp: now + 59 + 600 }), secret()))
    await expectRejected(t.app, signed(HS256, claims({ iat: now + 61, exp: now + 61 + 600 }), secret()))
    await expectAccepted(t.app, signed(HS256, claims({ nbf: now + 60 }), secret()))
    await expectRejected(t.app, signed(HS256, claims({ nbf: now + 61 }), secret()))
  })

  it('rejects a token that lives longer than the configured access-token lifetime', async () => {
    const now = Math.floor(t.clock.now().getTime() / 1000)
    await expectAccepted(t.app, signed(HS256, claims({ iat: now, exp: now + 720 }), secret()))
    await expectRejected(t.app, signed(HS256, claims({ iat: now, exp: now + 721 }), secret()))
    await expectRejected(t.app, signed(HS256, claims({ iat: now - 3600, exp: now + 3600 * 24 }), secret()))
  })
})

describe('secret rotation (platform.auth.jwt.previous-secrets)', () => {
  const email = 'rotation@example.com'
  const next = randomBytes(32).toString('base64')
  const rotated = useTestAppBeside(t, () => ({
    clock: t.clock,
    config: {
      'platform.auth.jwt.secret': next,
      'platform.auth.jwt.previous-secrets': t.config.auth.jwt.secret,
    },
  }))

  it('keeps tokens signed with the previous secret valid, and signs new ones with the new secret', async () => {
    await newUser(t.app, { email })
    const before = await login(t.app, email)
    await expectAccepted(rotated.app, before.accessToken)
    const after = await login(rotated.app, email)
    const header = JSON.parse(Buffer.from(after.accessToken.split('.')[0] as string, 'base64url').toString())
    expect(header.kid).toBe(keyId(Buffer.from(next, 'base64')))
    // The old instance does not know the new secret: rotation is rolled out before anyone signs with it.
    await expectRejected(t.app, after.accessToken)
  })

  it('never signs with a previous secret and refuses a secret that is neither current nor previous', async () => {
    const stranger = randomBytes(32)
    const now = Math.floor(t.clock.now().getTime() / 1000)
    const claims = {
      sub: randomUUID(),
      sid: randomUUID(),
      org: randomUUID(),
      ver: 0,
      iss: t.config.auth.jwt.issuer,
      aud: t.config.auth.jwt.userAudience,
      iat: now,
      exp: now + 600,
    }
    await expectRejected(
      rotated.app,
      signed({ alg: 'HS256', typ: 'JWT', kid: keyId(stranger) }, claims, stranger),
    )
    const issued = rotated.app.services.tokens.issueUserToken({
      sub: claims.sub,
      sid: claims.sid,
      org: claims.org,
      ver: 0,
    })
    const header = JSON.parse(Buffer.from(issued.token.split('.')[0] as string, 'base64url').toString())
    expect(header.kid).not.toBe(keyId(secret()))
  })

  it('refuses a previous secret shorter than 256 bits at start-up, naming the property', () => {
    const error = configErrorOf(() =>
      testConfig({ 'platform.auth.jwt.previous-secrets': randomBytes(16).toString('base64') }),
    )
    expect(error.message).toContain('platform.auth.jwt.previous-secrets')
  })
})

describe('session version', () => {
  it('without a provider (default), keeps an access token valid after logout-all until it expires', async () => {
    await newUser(t.app, { email: 'no-version@example.com' })
    const session = await login(t.app, 'no-version@example.com')
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout-all',
      cookies: { access_token: session.accessToken },
    })
    expect(res.statusCode).toBe(204)
    await expectAccepted(t.app, session.accessToken)
    t.clock.advanceSeconds(721)
    await expectRejected(t.app, session.accessToken)
  })

  describe('with the built-in provider enabled', () => {
    const versioned = useTestAppBeside(t, { config: { 'platform.auth.session-version.enabled': 'true' } })

    it('rejects an access token issued before logout-all at once, and accepts one issued after', async () => {
      const { app } = versioned
      await newUser(app, { email: 'versioned@example.com' })
      const first = await login(app, 'versioned@example.com')
      const second = await login(app, 'versioned@example.com')
      await expectAccepted(app, second.accessToken)
      const res = await app.inject({
        method: 'POST',
        url: '/api/auth/logout-all',
        cookies: { access_token: first.accessToken },
      })
      expect(res.statusCode).toBe(204)
      await expectRejected(app, first.accessToken)
      await expectRejected(app, second.accessToken)
      const after = await login(app, 'versioned@example.com')
      await expectAccepted(app, after.accessToken)
    })
  })

  describe('with a provider supplied by the deployment', () => {
    const versions = new Map<string, number>()
    const sessionVersionProvider: SessionVersionProvider = {
      currentVersion: async (userId) => versions.get(userId) ?? null,
    }
    let app: FastifyInstance

    beforeAll(async () => {
      // The harness's object store of the file's main app serves this one too.
      app = await buildAppBeside(t, {}, { sessionVersionProvider })
    })

    afterAll(async () => {
      await app?.close()
    })

    it('rejects a token whose ver differs from the provided version, and ignores ver when none is provided', async () => {
      await newUser(app, { email: 'custom-version@example.com' })
      const unversioned = await login(app, 'custom-version@example.com')
      versions.set(unversioned.userId, 3)
      // Issued with ver 0 while the provider returned nothing; now the provider says 3.
      await expectRejected(app, unversioned.accessToken)
      const current = await login(app, 'custom-version@example.com')
      await expectAccepted(app, current.accessToken)
      versions.set(current.userId, 4)
      await expectRejected(app, current.accessToken)
      versions.delete(current.userId)
      await expectAccepted(app, current.accessToken)
      await expectAccepted(app, unversioned.accessToken)
    })
  })
})
