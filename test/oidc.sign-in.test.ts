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
import { configErrorOf, createTestApp, type TestApp, testConfig } from './helpers/app.ts'
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
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'GET', url: `${url.pathname}${url.search}`, cookies, headers })
}

/** What Chromium sends on a top-level navigation (the provider's redirect back is one). */
const NAVIGATION = {
  accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8',
  'sec-fetch-mode': 'navigate',
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
  _provider: RunningProvider,
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

/** The ids of the accounts with the address. */
const accountsWith = (email: string) =>
  t.app.db.selectFrom('accounts').select('id').where('email', '=', email).execute()

async function me(session: Session) {
  const res = await asUser(t.app, session, { method: 'GET', url: '/api/auth/me' })
  expect(res.statusCode).toBe(200)
  const body = res.json() as { userId: string; email: string; organizationId: string }
  return { id: body.userId, email: body.email, organizationId: body.organizationId }
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
    expect(res.headers.location).toBe(`${FRONTEND_URL}/?oidc=signed-in`)
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

  it('makes one account of two parallel first sign-ins with one identity', async () => {
    const email = uniqueEmail('twice')
    const sub = person(acme, { email, email_verified: true })
    const flows = await Promise.all([start(t.app, 'acme'), start(t.app, 'acme')])
    const backs: URL[] = []
    for (const flow of flows) backs.push(await passProviderPages(flow.location.href, sub))
    const answers = await Promise.all(
      flows.map((flow, index) => callback(t.app, backs[index] as URL, { oidc_flow: flow.flow })),
    )
    expect(answers.map((res) => res.statusCode)).toEqual([302, 302])
    const [first, second] = await Promise.all(answers.map((res) => me(sessionCookies(res))))
    expect(second?.id).toBe(first?.id)
    const accounts = await accountsWith(email)
    expect(accounts).toHaveLength(1)
  })

  it('refuses an unverified email: 403 OIDC_EMAIL_UNVERIFIED, nothing created', async () => {
    const email = uniqueEmail('unverified')
    const res = await signInAt('acme', acme, person(acme, { email, email_verified: false }))
    expectProblem(res, 403, 'OIDC_EMAIL_UNVERIFIED')
    expect(cookie(res, 'access_token')).toBeUndefined()
    expect(await accountsWith(email)).toEqual([])
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

describe('a refusal met by a browser', () => {
  const refusedAt = (res: LightMyRequestResponse) => {
    expect(res.statusCode).toBe(302)
    expect(res.headers['cache-control']).toBe('no-store')
    expect(res.headers['content-type']).toBeUndefined()
    for (const name of ['access_token', 'refresh_token', 'oidc_second_factor'])
      expect(cookie(res, name)).toBeUndefined()
    expect(cookie(res, 'oidc_flow')).toMatchObject({ value: '', path: '/api/auth/oidc' })
    return res.headers.location
  }

  it('redirects a navigation (Accept prefers text/html) to the frontend with the code alone', async () => {
    const email = uniqueEmail('browser-unverified')
    const sub = person(acme, { email, email_verified: false })
    const { location, flow } = await start(t.app, 'acme')
    const back = await passProviderPages(location.href, sub)
    const res = await callback(t.app, back, { oidc_flow: flow }, { accept: NAVIGATION.accept })
    expect(refusedAt(res)).toBe(`${FRONTEND_URL}/?oidc=error&code=OIDC_EMAIL_UNVERIFIED`)
    expect(await accountsWith(email)).toEqual([])
  })

  it('redirects on Sec-Fetch-Mode: navigate, whatever the Accept header (the flow cookie gone: OIDC_STATE_INVALID)', async () => {
    const { location } = await start(t.app, 'acme')
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('browser-state'), email_verified: true }),
    )
    const res = await callback(t.app, back, {}, { accept: '*/*', 'sec-fetch-mode': 'navigate' })
    expect(refusedAt(res)).toBe(`${FRONTEND_URL}/?oidc=error&code=OIDC_STATE_INVALID`)
  })

  it("puts nothing of the provider's answer nor of the detail in the address", async () => {
    const { location, flow } = await start(t.app, 'crafted')
    const back = new URL(REDIRECT_URI)
    back.search = new URLSearchParams({
      error: 'access_denied',
      error_description: 'Pat said no <script>',
      state: location.searchParams.get('state') ?? '',
      iss: crafted.issuer,
    }).toString()
    const res = await callback(t.app, back, { oidc_flow: flow }, NAVIGATION)
    const to = new URL(refusedAt(res) ?? '')
    expect(Object.fromEntries(to.searchParams)).toEqual({ oidc: 'error', code: 'OIDC_RESPONSE_INVALID' })
    expect(to.href).not.toMatch(/access_denied|Pat|refused/)
  })

  it('sends a refused link back to the account screen', async () => {
    const sub = person(acme, { email: uniqueEmail('browser-held'), email_verified: true })
    expect((await signInAt('acme', acme, sub)).statusCode).toBe(302)
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const link = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/account/identities/link',
      payload: { provider: 'acme' },
    })
    const back = await passProviderPages(link.json().redirectUrl, sub)
    const res = await callback(
      t.app,
      back,
      { oidc_flow: cookie(link, 'oidc_flow')?.value ?? '', access_token: session.access },
      NAVIGATION,
    )
    expect(refusedAt(res)).toBe(`${FRONTEND_URL}/?oidc=error&code=IDENTITY_ALREADY_LINKED#account`)
  })

  it('keeps answering problem+json to a client that prefers JSON, or names no preference', async () => {
    for (const headers of [{ accept: 'application/json' }, { accept: '*/*' }, {}] as Record<
      string,
      string
    >[]) {
      const sub = person(acme, { email: uniqueEmail('api-unverified'), email_verified: false })
      const { location, flow } = await start(t.app, 'acme')
      const back = await passProviderPages(location.href, sub)
      const res = await callback(t.app, back, { oidc_flow: flow }, headers)
      expectProblem(res, 403, 'OIDC_EMAIL_UNVERIFIED')
      expect(res.headers.location).toBeUndefined()
      expect(cookie(res, 'oidc_flow')?.value).toBe('')
    }
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

  it("refuses the provider's error answer (access_denied): 401 OIDC_RESPONSE_INVALID naming it", async () => {
    const { location, flow } = await start(t.app, 'crafted')
    const back = new URL(REDIRECT_URI)
    back.search = new URLSearchParams({
      error: 'access_denied',
      state: location.searchParams.get('state') ?? '',
      iss: crafted.issuer,
    }).toString()
    const res = await callback(t.app, back, { oidc_flow: flow })
    expectProblem(res, 401, 'OIDC_RESPONSE_INVALID')
    expect(res.json().detail).toMatch(/access_denied/)
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

describe('linking, explicit', () => {
  /** A password user signed in just now. */
  async function freshUser() {
    const user = await newUser(t.app)
    return { user, session: await signIn(t.app, user) }
  }

  async function startLink(session: Session, provider = 'acme') {
    const res = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/account/identities/link',
      payload: { provider },
    })
    expect(res.statusCode).toBe(200)
    return { location: new URL(res.json().redirectUrl), flow: cookie(res, 'oidc_flow')?.value ?? '' }
  }

  const identities = async (session: Session) =>
    (await asUser(t.app, session, { method: 'GET', url: '/api/account/identities' })).json().items as {
      id: string
      provider: string
      email: string | null
    }[]

  it('links an identity to the signed-in account, lists it, and signs that account in with it', async () => {
    const { user, session } = await freshUser()
    // The provider's address need not be the account's, nor verified: the link is the proof.
    const sub = person(acme, { email: uniqueEmail('elsewhere'), email_verified: false })
    const { location, flow } = await startLink(session)
    const back = await passProviderPages(location.href, sub)
    const res = await callback(t.app, back, { oidc_flow: flow, access_token: session.access })
    expect(res.statusCode).toBe(302)
    expect(res.headers.location).toBe(`${FRONTEND_URL}/#account`)
    expect(await identities(session)).toMatchObject([{ provider: 'platform:acme' }])
    const signedIn = await signInAt('acme', acme, sub)
    expect(signedIn.statusCode).toBe(302)
    expect((await me(sessionCookies(signedIn))).id).toBe(user.id)
    const linked = await t.app.db
      .selectFrom('audit_events')
      .select('type')
      .where('organization_id', '=', user.organizationId)
      .where('type', '=', 'identity.linked')
      .execute()
    expect(linked).toHaveLength(1)
  })

  it("finishes only in the session that started it: A's flow cannot link to B (403 ACCESS_DENIED)", async () => {
    const a = await freshUser()
    const b = await freshUser()
    const sub = person(acme, { email: uniqueEmail('bound'), email_verified: true })
    const { location, flow } = await startLink(a.session)
    const back = await passProviderPages(location.href, sub)
    const res = await callback(t.app, back, { oidc_flow: flow, access_token: b.session.access })
    expectProblem(res, 403, 'ACCESS_DENIED')
    expect(await identities(a.session)).toEqual([])
    expect(await identities(b.session)).toEqual([])
  })

  it('needs a sign-in within the last five minutes: 403 REAUTHENTICATION_REQUIRED', async () => {
    const { session } = await freshUser()
    t.clock.advanceSeconds(301)
    const res = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/account/identities/link',
      payload: { provider: 'acme' },
    })
    expectProblem(res, 403, 'REAUTHENTICATION_REQUIRED')
  })

  it('refuses an identity another account holds: 409 IDENTITY_ALREADY_LINKED', async () => {
    const sub = person(acme, { email: uniqueEmail('held'), email_verified: true })
    expect((await signInAt('acme', acme, sub)).statusCode).toBe(302)
    const { session } = await freshUser()
    const { location, flow } = await startLink(session)
    const back = await passProviderPages(location.href, sub)
    const res = await callback(t.app, back, { oidc_flow: flow, access_token: session.access })
    expectProblem(res, 409, 'IDENTITY_ALREADY_LINKED')
  })

  it('unlinks an identity while another way to sign in is left; another user cannot (404)', async () => {
    const { session } = await freshUser()
    const { location, flow } = await startLink(session)
    const back = await passProviderPages(
      location.href,
      person(acme, { email: uniqueEmail('u'), email_verified: true }),
    )
    expect((await callback(t.app, back, { oidc_flow: flow, access_token: session.access })).statusCode).toBe(
      302,
    )
    const [identity] = await identities(session)
    const other = await freshUser()
    const foreign = await asUser(t.app, other.session, {
      method: 'DELETE',
      url: `/api/account/identities/${identity?.id}`,
    })
    expectProblem(foreign, 404, 'NOT_FOUND')
    const res = await asUser(t.app, session, {
      method: 'DELETE',
      url: `/api/account/identities/${identity?.id}`,
    })
    expect(res.statusCode).toBe(204)
    expect(await identities(session)).toEqual([])
  })

  it('refuses to unlink the last way to sign in: 409 LAST_SIGN_IN_METHOD', async () => {
    const res = await signInAt(
      'acme',
      acme,
      person(acme, { email: uniqueEmail('only'), email_verified: true }),
    )
    const session = sessionCookies(res)
    const [identity] = await identities(session)
    const unlink = await asUser(t.app, session, {
      method: 'DELETE',
      url: `/api/account/identities/${identity?.id}`,
    })
    expectProblem(unlink, 409, 'LAST_SIGN_IN_METHOD')
    expect(await identities(session)).toHaveLength(1)
  })

  it('lists and unlinks only for a signed-in user (401)', async () => {
    expectProblem(
      await t.app.inject({ method: 'GET', url: '/api/account/identities' }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
  })
})

describe('pre-hijack', () => {
  it("retires an attacker's pending password sign-up for the victim's address when the victim signs in with a provider", async () => {
    const victim = uniqueEmail('victim')
    const attackerPassword = 'attacker chose this password'
    const pending = await signUp(t.app, {
      email: victim,
      password: attackerPassword,
      organizationName: 'Trap',
    })
    expect(pending.statusCode).toBe(202)
    await deliverMail(t)
    const proof = mailedProof((await mailsTo(t.smtp, victim)).at(-1), PAGES.signUp)

    const res = await signInAt('acme', acme, person(acme, { email: victim, email_verified: true }))
    expect(res.statusCode).toBe(302)
    const account = await me(sessionCookies(res))

    // The mailed proof no longer creates anything, and the attacker's password signs nobody in.
    expectProblem(await verifySignUp(t.app, { token: proof.token }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(await verifySignUp(t.app, { email: victim, code: proof.code }), 400, 'EMAIL_PROOF_INVALID')
    expectProblem(await login(t.app, victim, attackerPassword), 401, 'INVALID_CREDENTIALS')
    const accounts = await accountsWith(victim)
    expect(accounts).toEqual([{ id: account.id }])
  })
})

describe('the second factor', () => {
  const codeFor = (secret: string) =>
    new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({
      timestamp: t.clock.now().getTime(),
    })

  it('asks an account with OTP for its code after the provider, then signs in with method oidc+otp', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const { secret } = (await asUser(t.app, session, { method: 'POST', url: '/api/auth/otp/setup' })).json()
    const enabled = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/auth/otp/enable',
      payload: { code: codeFor(secret) },
    })
    expect(enabled.statusCode).toBe(200)
    t.clock.advanceSeconds(30)
    const fresh = await signIn(t.app, user, { otpCode: codeFor(secret) })
    const sub = person(acme, { email: uniqueEmail('otp'), email_verified: true })
    const link = await asUser(t.app, fresh, {
      method: 'POST',
      url: '/api/account/identities/link',
      payload: { provider: 'acme' },
    })
    const back = await passProviderPages(link.json().redirectUrl, sub)
    const linked = await callback(t.app, back, {
      oidc_flow: cookie(link, 'oidc_flow')?.value ?? '',
      access_token: fresh.access,
    })
    expect(linked.statusCode).toBe(302)

    const res = await signInAt('acme', acme, sub)
    expect(res.statusCode).toBe(302)
    expect(res.headers.location).toBe(`${FRONTEND_URL}/?oidc=second-factor`)
    expect(cookie(res, 'access_token')).toBeUndefined()
    const held = cookie(res, 'oidc_second_factor')?.value ?? ''
    const complete = (payload: object) =>
      t.app.inject({
        method: 'POST',
        url: '/api/auth/oidc/second-factor',
        payload,
        cookies: { oidc_second_factor: held },
      })
    expectProblem(await complete({}), 401, 'OTP_REQUIRED')
    expectProblem(await complete({ otpCode: '000000' }), 401, 'INVALID_OTP')
    t.clock.advanceSeconds(30)
    const done = await complete({ otpCode: codeFor(secret) })
    expect(done.statusCode).toBe(200)
    expect(done.json().userId).toBe(user.id)
    const events = await t.app.db
      .selectFrom('audit_events')
      .select('data')
      .where('organization_id', '=', user.organizationId)
      .where('type', '=', 'sign_in.succeeded')
      .orderBy('sequence', 'desc')
      .limit(1)
      .execute()
    expect(events[0]?.data).toMatchObject({ method: 'oidc+otp' })
    // The waiting sign-in is spent.
    expectProblem(await complete({ otpCode: codeFor(secret) }), 400, 'OIDC_STATE_INVALID')
  })
})

describe('the providers property', () => {
  const providers = (issuer: string, extra: object = {}) =>
    JSON.stringify([{ id: 'p', issuer, clientId: 'c', clientSecret: 's', ...extra }])

  it('fills in the presets: Google by name, Microsoft Entra by name and xms_edov', () => {
    const config = testConfig({
      'platform.auth.oidc.providers': JSON.stringify([
        { id: 'google', issuer: 'https://accounts.google.com', clientId: 'g', clientSecret: 's' },
        {
          id: 'ms',
          issuer: 'https://login.microsoftonline.com/tenant/v2.0',
          clientId: 'm',
          clientSecret: 's',
        },
      ]),
    })
    expect(config.auth.oidc.providers).toMatchObject([
      {
        id: 'google',
        name: 'Google',
        emailVerifiedClaim: 'email_verified',
        scopes: ['openid', 'email', 'profile'],
      },
      { id: 'ms', name: 'Microsoft', emailVerifiedClaim: 'xms_edov' },
    ])
  })

  it('refuses an http issuer off loopback, and http at all outside the development and test profiles', () => {
    expect(
      configErrorOf(() => testConfig({ 'platform.auth.oidc.providers': providers('http://idp.example.com') }))
        .property,
    ).toBe('platform.auth.oidc.providers')
    const outsideDev = configErrorOf(() =>
      testConfig({
        'platform.profile': 'default',
        'platform.auth.oidc.providers': providers('http://127.0.0.1:9'),
      }),
    )
    expect(outsideDev.message).toMatch(/https/)
    expect(
      testConfig({ 'platform.auth.oidc.providers': providers('http://127.0.0.1:9') }).auth.oidc.providers,
    ).toHaveLength(1)
  })

  it('refuses what is not a JSON array of providers, a duplicate id and an unknown member', () => {
    for (const text of [
      '{',
      '{}',
      providers('https://a.example', { extra: 1 }),
      `[${providers('https://a.example').slice(1, -1)},${providers('https://b.example').slice(1, -1)}]`,
    ]) {
      expect(configErrorOf(() => testConfig({ 'platform.auth.oidc.providers': text })).property).toBe(
        'platform.auth.oidc.providers',
      )
    }
  })
})
