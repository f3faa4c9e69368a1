import type { LightMyRequestResponse } from 'fastify'
import { Secret, TOTP } from 'otpauth'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  asUser,
  cookie,
  deliverMail,
  expectProblem,
  FAST_LOGIN_CONFIG,
  FRONTEND_URL,
  login,
  mailsTo,
  newUser,
  type Session,
  signIn,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { EMAIL_PROOF_CONFIG, mailedProof, PAGES, signUp, verifySignUp } from './helpers/email-proofs.ts'
import {
  type CraftingIssuer,
  passProviderPages,
  type RunningProvider,
  startCraftingIssuer,
  startOidcProvider,
} from './helpers/oidc.ts'

// Sign-in with OpenID Connect providers against real ones on loopback: two oidc-provider instances
// (a Google-like provider, and one configured as Microsoft Entra, whose email counts as verified
// only with `xms_edov`), and for the ID-token refusals a small issuer that signs what each test
// crafts. Every refusal is its own test; identities are keyed by (issuer, subject), never email.

const REDIRECT_URI = 'http://localhost:8080/api/auth/oidc/callback'
const config: Record<string, string> = {
  ...EMAIL_PROOF_CONFIG,
  'platform.auth.email-sign-in.enabled': 'false',
}
let acme: RunningProvider
let entra: RunningProvider
let crafted: CraftingIssuer

beforeAll(async () => {
  ;[acme, entra, crafted] = await Promise.all([
    startOidcProvider(REDIRECT_URI),
    startOidcProvider(REDIRECT_URI),
    startCraftingIssuer(),
  ])
  config['platform.auth.oidc.providers'] = JSON.stringify([
    {
      id: 'acme',
      name: 'Acme ID',
      issuer: acme.issuer,
      clientId: acme.clientId,
      clientSecret: acme.clientSecret,
    },
    {
      id: 'entra',
      name: 'Microsoft',
      issuer: entra.issuer,
      clientId: entra.clientId,
      clientSecret: entra.clientSecret,
      emailVerifiedClaim: 'xms_edov',
    },
    { id: 'crafted', issuer: crafted.issuer, clientId: crafted.clientId, clientSecret: crafted.clientSecret },
  ])
})
afterAll(async () => {
  await Promise.all([acme?.close(), entra?.close(), crafted?.close()])
})

const t = useMailTestApp({ config })

interface Started {
  location: URL
  flow: string
}

async function start(app: TestApp['app'], providerId: string): Promise<Started> {
  const res = await app.inject({ method: 'GET', url: `/api/auth/oidc/${providerId}/start` })
  expect(res.statusCode).toBe(302)
  const flow = cookie(res, 'oidc_flow')
  expect(flow).toMatchObject({ httpOnly: true, path: '/api/auth/oidc', maxAge: 600, sameSite: 'Lax' })
  return { location: new URL(res.headers.location as string), flow: flow?.value ?? '' }
}

function callback(
  app: TestApp['app'],
  url: URL,
  cookies: Record<string, string>,
): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'GET', url: `${url.pathname}${url.search}`, cookies })
}

/** A person at `provider` with these claims; the login name is the subject. */
function person(
  provider: RunningProvider,
  claims: { email: string; email_verified?: boolean; xms_edov?: boolean },
) {
  const sub = `user-${Math.random().toString(36).slice(2)}`
  provider.accounts.set(sub, { name: 'Pat Doe', ...claims })
  return sub
}

/** Starts at the app, passes the provider's own pages as `sub`, and comes back to the callback. */
async function signInAt(
  providerId: string,
  provider: RunningProvider,
  sub: string,
  app = t.app,
  cookies: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  const { location, flow } = await start(app, providerId)
  const back = await passProviderPages(location.href, sub)
  return callback(app, back, { oidc_flow: flow, ...cookies })
}

const sessionCookies = (res: LightMyRequestResponse): Session => ({
  userId: '',
  sessionId: '',
  access: cookie(res, 'access_token')?.value ?? '',
  refresh: cookie(res, 'refresh_token')?.value ?? '',
})

async function me(session: Session) {
  const res = await asUser(t.app, session, { method: 'GET', url: '/api/auth/me' })
  expect(res.statusCode).toBe(200)
  return res.json() as { id: string; email: string; organizationId: string }
}

describe('the provider list and the start', () => {
  it('lists the deployment-wide providers by id and name', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/auth/oidc/providers' })
    expect(res.json()).toEqual({
      items: [
        { id: 'acme', name: 'Acme ID' },
        { id: 'entra', name: 'Microsoft' },
        { id: 'crafted', name: 'crafted' },
      ],
    })
  })

  it('redirects to the provider with PKCE S256, state, nonce and the one redirect URI', async () => {
    const { location } = await start(t.app, 'acme')
    expect(location.origin).toBe(acme.issuer)
    const query = Object.fromEntries(location.searchParams)
    expect(query).toMatchObject({
      client_id: acme.clientId,
      redirect_uri: REDIRECT_URI,
      response_type: 'code',
      code_challenge_method: 'S256',
      scope: 'openid email profile',
    })
    expect(query.state?.length).toBeGreaterThanOrEqual(32)
    expect(query.nonce?.length).toBeGreaterThanOrEqual(32)
    expect(query.code_challenge).toMatch(/^[A-Za-z0-9_-]{43}$/)
  })

  it('answers 404 for an unknown provider', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/auth/oidc/nobody/start' })
    expectProblem(res, 404, 'NOT_FOUND')
  })
})

describe('first sign-in', () => {
  it('creates the account and its organization for a verified email, signs in and redirects to the frontend', async () => {
    const email = uniqueEmail('new')
    const res = await signInAt('acme', acme, person(acme, { email, email_verified: true }))
    expect(res.statusCode).toBe(302)
    expect(res.headers.location).toBe(`${FRONTEND_URL}/`)
    expect(cookie(res, 'oidc_flow')?.value).toBe('')
    const account = await me(sessionCookies(res))
    expect(account.email).toBe(email)
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'data'])
      .where('organization_id', '=', account.organizationId)
      .orderBy('sequence')
      .execute()
    expect(events.map((e) => [e.type, (e.data as { method?: string }).method])).toEqual([
      ['account.signed_up', 'oidc'],
      ['sign_in.succeeded', 'oidc'],
    ])
  })

  it('signs the same (issuer, subject) in again to the same account, whatever email it now gives', async () => {
    const sub = person(acme, { email: uniqueEmail('first'), email_verified: true })
    const first = await me(sessionCookies(await signInAt('acme', acme, sub)))
    acme.accounts.set(sub, { email: uniqueEmail('changed'), email_verified: false })
    const again = await signInAt('acme', acme, sub)
    expect(again.statusCode).toBe(302)
    expect((await me(sessionCookies(again))).id).toBe(first.id)
  })

  it('refuses an unverified email: 403 OIDC_EMAIL_UNVERIFIED, nothing created', async () => {
    const email = uniqueEmail('unverified')
    const res = await signInAt('acme', acme, person(acme, { email, email_verified: false }))
    expectProblem(res, 403, 'OIDC_EMAIL_UNVERIFIED')
    expect(cookie(res, 'access_token')).toBeUndefined()
    const account = await t.app.db
      .selectFrom('accounts')
      .select('id')
      .where('email', '=', email)
      .executeTakeFirst()
    expect(account).toBeUndefined()
  })

  it('never signs an unverified email into the existing account that has it', async () => {
    const owner = await newUser(t.app)
    const res = await signInAt('acme', acme, person(acme, { email: owner.email, email_verified: false }))
    expectProblem(res, 403, 'OIDC_EMAIL_UNVERIFIED')
  })

  it('does not link a verified email to an existing account by itself: 409 IDENTITY_NOT_LINKED', async () => {
    const owner = await newUser(t.app)
    const res = await signInAt('acme', acme, person(acme, { email: owner.email, email_verified: true }))
    expectProblem(res, 409, 'IDENTITY_NOT_LINKED')
    expect(cookie(res, 'access_token')).toBeUndefined()
  })

  it('refuses an Entra email without xms_edov, even with email_verified: 403 OIDC_EMAIL_UNVERIFIED', async () => {
    const res = await signInAt(
      'entra',
      entra,
      person(entra, { email: uniqueEmail('entra'), email_verified: true }),
    )
    expectProblem(res, 403, 'OIDC_EMAIL_UNVERIFIED')
  })

  it('accepts an Entra email with xms_edov', async () => {
    const email = uniqueEmail('edov')
    const res = await signInAt('entra', entra, person(entra, { email, xms_edov: true }))
    expect(res.statusCode).toBe(302)
    expect((await me(sessionCookies(res))).email).toBe(email)
  })

  it('refuses a new address while sign-up is disabled: 403 SIGN_UP_DISABLED', async () => {
    const closed = await createTestApp({
      database: t.database,
      config: { ...FAST_LOGIN_CONFIG, ...config, 'platform.auth.sign-up.enabled': 'false' },
    })
    try {
      const email = uniqueEmail('closed')
      const res = await signInAt('acme', acme, person(acme, { email, email_verified: true }), closed.app)
      expectProblem(res, 403, 'SIGN_UP_DISABLED')
    } finally {
      await closed.close()
    }
  })
})

describe('the flow state', () => {
  it('refuses a callback with another state: 400 OIDC_STATE_INVALID', async () => {
    const { location, flow } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('s'), email_verified: true }),
    )
    back.searchParams.set('state', 'another-state')
    expectProblem(await callback(t.app, back, { oidc_flow: flow }), 400, 'OIDC_STATE_INVALID')
  })

  it('refuses a used flow: the same callback twice is 400 OIDC_STATE_INVALID the second time', async () => {
    const { location, flow } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('r'), email_verified: true }),
    )
    expect((await callback(t.app, back, { oidc_flow: flow })).statusCode).toBe(302)
    expectProblem(await callback(t.app, back, { oidc_flow: flow }), 400, 'OIDC_STATE_INVALID')
  })

  it('refuses a callback without the flow cookie (another browser): 400 OIDC_STATE_INVALID', async () => {
    const { location } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('c'), email_verified: true }),
    )
    expectProblem(await callback(t.app, back, {}), 400, 'OIDC_STATE_INVALID')
  })

  it('refuses a flow older than ten minutes: 400 OIDC_STATE_INVALID', async () => {
    const { location, flow } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('x'), email_verified: true }),
    )
    t.clock.advanceSeconds(601)
    expectProblem(await callback(t.app, back, { oidc_flow: flow }), 400, 'OIDC_STATE_INVALID')
  })

  it('refuses an answer without the iss parameter the provider advertises: 401 OIDC_RESPONSE_INVALID', async () => {
    const { location, flow } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('i'), email_verified: true }),
    )
    expect(back.searchParams.get('iss')).toBe(acme.issuer)
    back.searchParams.delete('iss')
    const res = await callback(t.app, back, { oidc_flow: flow })
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/iss/)
  })

  it('refuses an iss parameter naming another issuer (a mix-up): 401 OIDC_RESPONSE_INVALID', async () => {
    const { location, flow } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('m'), email_verified: true }),
    )
    back.searchParams.set('iss', entra.issuer)
    expectProblem(await callback(t.app, back, { oidc_flow: flow }), 401, 'OIDC_RESPONSE_INVALID')
  })
})

describe('the ID token', () => {
  /** Starts at the crafting issuer and comes back with a code whose token answer is `idToken(nonce)`. */
  async function withIdToken(
    claims: (nonce: string, now: number) => Record<string, unknown>,
    how: 'valid' | 'none' | 'foreign-key' = 'valid',
  ) {
    const { location, flow } = await start(t.app, 'crafted')
    const nonce = location.searchParams.get('nonce') ?? ''
    const now = Math.floor(Date.now() / 1000)
    crafted.nextIdToken = await crafted.sign(claims(nonce, now), how)
    const back = new URL(REDIRECT_URI)
    back.search = new URLSearchParams({
      code: 'code',
      state: location.searchParams.get('state') ?? '',
      iss: crafted.issuer,
    }).toString()
    return callback(t.app, back, { oidc_flow: flow })
  }
  const good = (nonce: string, now: number) => ({
    iss: crafted.issuer,
    aud: crafted.clientId,
    sub: `crafted-${Math.random()}`,
    iat: now,
    exp: now + 300,
    nonce,
    email: uniqueEmail('crafted'),
    email_verified: true,
  })

  it('accepts a well-formed token from the crafting issuer (the checks below are what differ)', async () => {
    expect((await withIdToken(good)).statusCode).toBe(302)
  })

  it('refuses another nonce: 401 OIDC_RESPONSE_INVALID', async () => {
    const res = await withIdToken((nonce, now) => ({ ...good(nonce, now), nonce: 'another-nonce' }))
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/nonce/)
  })

  it('refuses another audience: 401 OIDC_RESPONSE_INVALID', async () => {
    const res = await withIdToken((nonce, now) => ({ ...good(nonce, now), aud: 'another-client' }))
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/aud/)
  })

  it('refuses another issuer in the token: 401 OIDC_RESPONSE_INVALID', async () => {
    const res = await withIdToken((nonce, now) => ({ ...good(nonce, now), iss: acme.issuer }))
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/iss/)
  })

  it('refuses an expired token: 401 OIDC_RESPONSE_INVALID', async () => {
    const res = await withIdToken((nonce, now) => ({ ...good(nonce, now), iat: now - 3600, exp: now - 1800 }))
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/exp/)
  })

  it('refuses an unsigned token (alg none): 401 OIDC_RESPONSE_INVALID', async () => {
    const res = await withIdToken(good, 'none')
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/alg/)
  })

  it('refuses a token signed with a key the issuer does not publish: 401 OIDC_RESPONSE_INVALID', async () => {
    const res = await withIdToken(good, 'foreign-key')
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/signature/i)
  })
})
