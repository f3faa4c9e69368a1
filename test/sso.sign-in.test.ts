import { randomBytes } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  cookie,
  expectProblem,
  login,
  newUser,
  type Session,
  signIn,
  type TestUser,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { TestDnsServer } from './helpers/dns-server.ts'
import { passProviderPages, type RunningProvider, startOidcProvider } from './helpers/oidc.ts'

// Identity-first sign-in through organizations' connections, against two real OpenID providers
// (oidc-provider on loopback) as two organizations' identity providers, with their domains proved
// through a DNS server on loopback: just-in-time accounts (one under two parallel first sign-ins),
// linking only a verified address of the connection's organization, and a session always in the
// connection's organization, never another.

const REDIRECT_URI = 'http://localhost:8080/api/auth/oidc/callback'
const BASE = '/api/organizations/current/sso'

let t: TestApp
let dns: TestDnsServer
let idpA: RunningProvider
let idpB: RunningProvider
/** A deployment-wide provider ("Continue with …"), not any organization's connection. */
let idpSocial: RunningProvider

interface Org {
  admin: TestUser
  session: Session
  domain: string
  connectionId: string
}
let orgA: Org
let orgB: Org

const hex = () => randomBytes(4).toString('hex')

async function organizationWith(
  idp: RunningProvider | null,
  connection?: Partial<RunningProvider>,
): Promise<Org> {
  const domain = `corp-${hex()}.test`
  const admin = await newUser(t.app, { role: 'admin', email: `admin-${hex()}@${domain}` })
  const session = await signIn(t.app, admin)
  const as = (url: string, payload?: object) =>
    asUser(t.app, session, { method: 'POST', url, ...(payload ? { payload } : {}) })
  const claim = (await as(`${BASE}/domains`, { domain })).json()
  dns.publishTxt(claim.txtRecord.name, claim.txtRecord.value)
  expect((await as(`${BASE}/domains/${domain}/verify`)).json().status).toBe('verified')
  const source = { ...idp, ...connection }
  const created = await as(`${BASE}/connections`, {
    name: 'Corporate IdP',
    issuer: source.issuer,
    clientId: source.clientId,
    clientSecret: source.clientSecret,
  })
  expect(created.statusCode, created.body).toBe(201)
  return { admin, session, domain, connectionId: created.json().id }
}

beforeAll(async () => {
  dns = await TestDnsServer.start()
  ;[idpA, idpB, idpSocial] = await Promise.all([
    startOidcProvider(REDIRECT_URI),
    startOidcProvider(REDIRECT_URI),
    startOidcProvider(REDIRECT_URI),
  ])
  t = await createTestApp({
    config: {
      ...ACCOUNT_TEST_CONFIG,
      'platform.dns.servers': dns.address,
      'platform.auth.oidc.providers': JSON.stringify([
        {
          id: 'social',
          issuer: idpSocial.issuer,
          clientId: idpSocial.clientId,
          clientSecret: idpSocial.clientSecret,
        },
      ]),
    },
  })
  orgA = await organizationWith(idpA)
  orgB = await organizationWith(idpB)
})

afterAll(async () => {
  await t?.close()
  await Promise.all([idpA?.close(), idpB?.close(), idpSocial?.close(), dns?.close()])
})

/** A person at the provider with these claims; the login name is the subject. */
function person(idp: RunningProvider, claims: { email: string; email_verified?: boolean }) {
  const sub = `user-${hex()}`
  idp.accounts.set(sub, { name: 'Pat Doe', ...claims })
  return sub
}

async function ssoStart(email: string): Promise<{ location: URL; flow: string }> {
  const res = await t.app.inject({ method: 'POST', url: '/api/auth/sso/start', payload: { email } })
  expect(res.statusCode, res.body).toBe(200)
  const flow = cookie(res, 'oidc_flow')
  expect(flow).toMatchObject({ httpOnly: true, path: '/api/auth/oidc', maxAge: 600 })
  return { location: new URL(res.json().redirectUrl), flow: flow?.value ?? '' }
}

const callback = (url: URL, flow: string) =>
  t.app.inject({ method: 'GET', url: `${url.pathname}${url.search}`, cookies: { oidc_flow: flow } })

/** Types `typed` on the sign-in page, passes the provider's pages as `sub`, comes back to the callback. */
async function signInWithSso(typed: string, sub: string): Promise<LightMyRequestResponse> {
  const { location, flow } = await ssoStart(typed)
  return callback(await passProviderPages(location.href, sub), flow)
}

async function me(res: LightMyRequestResponse) {
  expect(res.statusCode, res.body).toBe(302)
  const access = cookie(res, 'access_token')?.value ?? ''
  const answer = await asUser(
    t.app,
    { userId: '', sessionId: '', access, refresh: '' },
    { method: 'GET', url: '/api/auth/me' },
  )
  expect(answer.statusCode).toBe(200)
  const body = answer.json()
  return { ...body, id: body.userId } as { id: string; email: string; organizationId: string; role: string }
}

const accountsWith = (email: string) =>
  t.app.db.selectFrom('accounts').select(['id', 'organization_id']).where('email', '=', email).execute()

describe('POST /api/auth/sso/start', () => {
  it("sends a verified domain's address to its organization's identity provider, known account or not", async () => {
    const known = await ssoStart(orgA.admin.email)
    const unknown = await ssoStart(`nobody-${hex()}@${orgA.domain.toUpperCase()}`)
    for (const { location } of [known, unknown]) {
      expect(location.origin).toBe(new URL(idpA.issuer).origin)
      expect(location.searchParams.get('client_id')).toBe(idpA.clientId)
      expect(location.searchParams.get('code_challenge_method')).toBe('S256')
      expect(location.searchParams.get('redirect_uri')).toBe(REDIRECT_URI)
    }
    expect((await ssoStart(`someone@${orgB.domain}`)).location.origin).toBe(new URL(idpB.issuer).origin)
  })

  it('answers 404 for a domain nobody verified, whether or not an account has the address', async () => {
    const member = await newUser(t.app, { email: `member-${hex()}@unclaimed-${hex()}.test` })
    for (const email of [member.email, `nobody-${hex()}@unclaimed-${hex()}.test`, 'not-an-address']) {
      const res = await t.app.inject({ method: 'POST', url: '/api/auth/sso/start', payload: { email } })
      expectProblem(res, 404, 'NOT_FOUND')
    }
  })
})

describe('signing in through a connection', () => {
  it('provisions a member just in time on the first sign-in, and signs the same account in afterwards', async () => {
    const email = `new-${hex()}@${orgA.domain}`
    const sub = person(idpA, { email, email_verified: true })
    const first = await me(await signInWithSso(email, sub))
    expect(first).toMatchObject({ email, organizationId: orgA.admin.organizationId, role: 'member' })
    const again = await me(await signInWithSso(email, sub))
    expect(again.id).toBe(first.id)
    const events = await t.app.db
      .selectFrom('audit_events')
      .select(['type', 'subject_id'])
      .where('organization_id', '=', orgA.admin.organizationId)
      .where('type', '=', 'sso.user_provisioned')
      .execute()
    expect(events.filter((event) => event.subject_id === first.id)).toHaveLength(1)
    // The account has no password: nothing signs it in but the connection.
    expectProblem(await login(t.app, email, ''), 400, 'VALIDATION_FAILED')
  })

  it('creates one account for two parallel first sign-ins of one person', async () => {
    const email = `twice-${hex()}@${orgA.domain}`
    const sub = person(idpA, { email, email_verified: true })
    const flows = await Promise.all([ssoStart(email), ssoStart(email)])
    const backs = await Promise.all(flows.map(({ location }) => passProviderPages(location.href, sub)))
    const answers = await Promise.all(backs.map((back, i) => callback(back, flows[i]?.flow ?? '')))
    const signedIn = await Promise.all(answers.map(me))
    expect(signedIn[0]?.id).toBe(signedIn[1]?.id)
    expect(await accountsWith(email)).toHaveLength(1)
    const identities = await t.app.db
      .selectFrom('federated_identities')
      .select('account_id')
      .where('subject', '=', sub)
      .execute()
    expect(identities).toEqual([{ account_id: signedIn[0]?.id }])
  })

  it("links an existing account of the connection's organization only when the provider verified the address", async () => {
    const member = await newUser(t.app, {
      organizationId: orgA.admin.organizationId,
      email: `m-${hex()}@${orgA.domain}`,
    })
    const unverified = person(idpA, { email: member.email, email_verified: false })
    expectProblem(await signInWithSso(member.email, unverified), 403, 'OIDC_EMAIL_UNVERIFIED')
    const verified = person(idpA, { email: member.email, email_verified: true })
    expect((await me(await signInWithSso(member.email, verified))).id).toBe(member.id)
  })

  it("never signs in to another organization: org B's provider cannot reach org A's accounts", async () => {
    const sessionsBefore = await t.app.db.selectFrom('sessions').select('id').execute()
    // B's provider asserts an address at A's domain: B has not verified it.
    const intruder = person(idpB, { email: orgA.admin.email, email_verified: true })
    expectProblem(await signInWithSso(`x@${orgB.domain}`, intruder), 403, 'SSO_DOMAIN_NOT_VERIFIED')
    // An address at B's domain whose account belongs to A (a contractor of A).
    const contractor = await newUser(t.app, {
      organizationId: orgA.admin.organizationId,
      email: `c-${hex()}@${orgB.domain}`,
    })
    const claimed = person(idpB, { email: contractor.email, email_verified: true })
    expectProblem(await signInWithSso(contractor.email, claimed), 403, 'SSO_ACCOUNT_IN_OTHER_ORGANIZATION')
    expect(await accountsWith(contractor.email)).toEqual([
      { id: contractor.id, organization_id: orgA.admin.organizationId },
    ])
    const after = await t.app.db.selectFrom('sessions').select('id').execute()
    expect(after.length).toBe(sessionsBefore.length)
    // B's own people land in B.
    const own = `own-${hex()}@${orgB.domain}`
    expect(
      (await me(await signInWithSso(own, person(idpB, { email: own, email_verified: true })))).organizationId,
    ).toBe(orgB.admin.organizationId)
  })

  it("refuses an identity linked in organization A through organization C's connection to the same issuer", async () => {
    const email = `linked-${hex()}@${orgA.domain}`
    const sub = person(idpA, { email, email_verified: true })
    await me(await signInWithSso(email, sub))
    // C connects to the same issuer (as two organizations may both use one public provider).
    const orgC = await organizationWith(idpA)
    expectProblem(await signInWithSso(`anyone@${orgC.domain}`, sub), 403, 'SSO_ACCOUNT_IN_OTHER_ORGANIZATION')
  })

  it('keeps SSO open to members of an organization that requires it', async () => {
    const put = await asUser(t.app, orgA.session, {
      method: 'PUT',
      url: `/api/organizations/${orgA.admin.organizationId}/config/security.sso-required`,
      payload: { value: 'true' },
    })
    expect(put.statusCode).toBe(200)
    const member = await newUser(t.app, {
      organizationId: orgA.admin.organizationId,
      email: `r-${hex()}@${orgA.domain}`,
    })
    expectProblem(await login(t.app, member.email, member.password), 403, 'SSO_REQUIRED')
    const sub = person(idpA, { email: member.email, email_verified: true })
    expect((await me(await signInWithSso(member.email, sub))).id).toBe(member.id)

    // A deployment-wide provider identity linked to the member is another way in, refused alike.
    const socialSub = person(idpSocial, { email: member.email, email_verified: true })
    await t.app.db
      .insertInto('federated_identities')
      .values({
        organization_id: member.organizationId,
        account_id: member.id,
        issuer: idpSocial.issuer,
        subject: socialSub,
        provider_ref: 'platform:social',
        email: member.email,
        created_at: t.clock.now(),
      })
      .execute()
    const started = await t.app.inject({ method: 'GET', url: '/api/auth/oidc/social/start' })
    expect(started.statusCode, started.body).toBe(302)
    const flow = cookie(started, 'oidc_flow')?.value ?? ''
    const back = await passProviderPages(String(started.headers.location), socialSub)
    expectProblem(await callback(back, flow), 403, 'SSO_REQUIRED')
  })
})
