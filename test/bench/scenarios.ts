import type { Options } from 'autocannon'

export interface Scenario {
  name: string
  /** Which server answers: the bare baseline or the service. */
  target: 'bare' | 'app'
  path: string
  method?: Options['method']
  expectStatus: number
  /** The floor this scenario is a ratio of, and the ratio it should reach. */
  floor?: 'A' | 'B' | 'C'
  goal?: number
  /** Preparation against the running service (log in, seed), run before each autocannon run. */
  prepare?: (baseUrl: string, seed: Seed) => Promise<Partial<Options> & { path?: string }>
}

/** What `npm run bench` created through the CLI before starting the service. */
export interface Seed {
  /** The service's address (floors log in there, then call the floor server). */
  appUrl: string
  apiKey: string
  clientId: string
  clientSecret: string
  /** A purchase_request object owned by the bench user's organization (tuple seeded directly). */
  ownedObjectId: string
  /** A readable purchase request (with its ownership tuple and one confirmed file). */
  readablePurchaseRequest: string
  confirmedFileId: string
  /** The cursor of a page 90% deep into the organization's purchase requests. */
  deepCursor: string
  /** DRAFT purchase requests of the bench user, each submitted once by the transition scenario. */
  draftPool: string[]
}

/** Logs in once per scenario run; the cookie header for the bench user. */
async function userCookie(baseUrl: string): Promise<string> {
  return `access_token=${(await login(baseUrl)).access}`
}

/** The user `npm run bench` seeds (through the CLI) before starting the service. */
export const BENCH_USER = { email: 'bench@example.test', password: 'bench-password-0123456789' }

/** A member of the bench organization, impersonated by the bench user (an admin). */
export const BENCH_MEMBER = { email: 'bench-member@example.test' }

/** The admin of a second organization whose `security.ip-allowlist` admits the loopback addresses. */
export const BENCH_ALLOWLIST_ADMIN = { email: 'bench-allowlist@example.test' }

/** Logins and their floor run with 4 connections: argon2id, not the connections, bounds them. */
const LOGIN_CONNECTIONS = 4

/** Enough sessions for every connection of a run to have a token in flight. */
const CONNECTIONS_MAX = Number(process.env.BENCH_CONNECTIONS ?? 10)

const json = { 'content-type': 'application/json' }
const loginBody = JSON.stringify({ username: BENCH_USER.email, password: BENCH_USER.password })
const signUpBody = { password: BENCH_USER.password, organizationName: 'Bench sign-up' }

function cookieValue(setCookie: string[] | string | null | undefined, name: string): string {
  for (const line of [setCookie ?? []].flat()) {
    const match = new RegExp(`^${name}=([^;]*)`).exec(line)
    if (match?.[1]) return match[1]
  }
  throw new Error(`no ${name} cookie`)
}

async function login(baseUrl: string, body = loginBody): Promise<{ access: string; refresh: string }> {
  const res = await fetch(`${baseUrl}/api/auth/login`, { method: 'POST', headers: json, body })
  if (res.status !== 200) throw new Error(`bench login failed: ${res.status} ${await res.text()}`)
  const cookies = res.headers.getSetCookie()
  return { access: cookieValue(cookies, 'access_token'), refresh: cookieValue(cookies, 'refresh_token') }
}

/** autocannon hands onResponse the raw header list ([name, value, …]) or an object. */
function setCookieFrom(headers: unknown): string[] {
  if (Array.isArray(headers)) {
    const values: string[] = []
    for (let i = 0; i + 1 < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === 'set-cookie') values.push(String(headers[i + 1]))
    }
    return values
  }
  const value = (headers as Record<string, string | string[]>)?.['set-cookie']
  return [value ?? []].flat()
}

// The scenarios of `npm run bench`. Features add theirs here.
export const scenarios: Scenario[] = [
  { name: 'bare Fastify route', target: 'bare', path: '/bare', expectStatus: 200 },
  {
    name: 'floor A: Fastify + cookie + cached fast-jwt verify, no DB',
    target: 'bare',
    path: '/floor/jwt',
    expectStatus: 200,
    prepare: async (_baseUrl, seed) => ({ headers: { cookie: await userCookie(seed.appUrl) } }),
  },
  {
    name: 'floor B: floor A + one primary-key read (Kysely, pg)',
    target: 'bare',
    path: '/floor/pk',
    expectStatus: 200,
    prepare: async (_baseUrl, seed) => ({ headers: { cookie: await userCookie(seed.appUrl) } }),
  },
  {
    name: `floor C: argon2id verification at the service's default cost (${LOGIN_CONNECTIONS} connections)`,
    target: 'bare',
    path: '/floor/argon2',
    method: 'POST',
    expectStatus: 200,
    prepare: async () => ({ connections: LOGIN_CONNECTIONS }),
  },
  { name: 'GET /health/live', target: 'app', path: '/health/live', expectStatus: 200 },
  {
    name: '401 on a protected route (no credentials)',
    target: 'app',
    path: '/api/auth/sessions',
    expectStatus: 401,
  },
  {
    name: 'authenticated request needing no DB (404 of an unknown purchase-request sub-resource)',
    floor: 'A',
    goal: 0.7,
    target: 'app',
    path: '/api/purchase-requests/00000000-0000-4000-8000-000000000000/nothing-here',
    expectStatus: 404,
    prepare: async (baseUrl) => ({ headers: { cookie: await userCookie(baseUrl) } }),
  },
  {
    name: 'GET /api/auth/sessions (cookie → principal → one read)',
    floor: 'B',
    goal: 0.6,
    target: 'app',
    path: '/api/auth/sessions',
    expectStatus: 200,
    prepare: async (baseUrl) => ({ headers: { cookie: `access_token=${(await login(baseUrl)).access}` } }),
  },
  {
    // Until a scoped route exists, the machine principals are measured against a user-only route:
    // the whole authentication runs (lookup, cache, principal) and the scope check answers 403.
    name: 'API key → principal (403 INSUFFICIENT_SCOPE on a user-only route)',
    target: 'app',
    path: '/api/auth/sessions',
    expectStatus: 403,
    prepare: async (_baseUrl, seed) => ({ headers: { 'x-api-key': seed.apiKey } }),
  },
  {
    name: 'Bearer service token → principal (403 INSUFFICIENT_SCOPE on a user-only route)',
    target: 'app',
    path: '/api/auth/sessions',
    expectStatus: 403,
    prepare: async (baseUrl, seed) => {
      const res = await fetch(`${baseUrl}/api/auth/service-token`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ clientId: seed.clientId, clientSecret: seed.clientSecret }),
      })
      const { accessToken } = (await res.json()) as { accessToken: string }
      return { headers: { authorization: `Bearer ${accessToken}` } }
    },
  },
  // Client credentials, the JSON endpoint and the form token endpoint (test/bench/oauth2.ts compares
  // both with Ory Hydra in one run, and times ES256 and EdDSA verification against HS256).
  {
    name: 'POST /api/auth/service-token (JSON client credentials)',
    target: 'app',
    path: '/api/auth/service-token',
    method: 'POST',
    expectStatus: 200,
    prepare: async (_baseUrl, seed) => ({
      headers: json,
      body: JSON.stringify({ clientId: seed.clientId, clientSecret: seed.clientSecret }),
    }),
  },
  {
    name: 'POST /oauth2/token (form, client_secret_basic)',
    target: 'app',
    path: '/oauth2/token',
    method: 'POST',
    expectStatus: 200,
    prepare: async (_baseUrl, seed) => ({
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${seed.clientId}:${seed.clientSecret}`).toString('base64')}`,
      },
      body: 'grant_type=client_credentials',
    }),
  },
  {
    name: 'POST /api/authz/check, allowed (user → member → owner organization), embedded evaluator',
    floor: 'B',
    goal: 0.6,
    target: 'app',
    path: '/api/authz/check',
    method: 'POST',
    expectStatus: 200,
    prepare: async (baseUrl, seed) => {
      const cookie = `access_token=${(await login(baseUrl)).access}`
      const body = JSON.stringify({
        relation: 'can_view',
        objectType: 'purchase_request',
        objectId: seed.ownedObjectId,
      })
      // The user's membership tuple reaches the evaluator through the outbox: wait (bounded) for it.
      for (let attempt = 0; attempt < 100; attempt++) {
        const res = await fetch(`${baseUrl}/api/authz/check`, {
          method: 'POST',
          headers: { ...json, cookie },
          body,
        })
        if (((await res.json()) as { allowed?: boolean }).allowed)
          return { headers: { ...json, cookie }, body }
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      throw new Error('the bench user never became a member in the authorization model')
    },
  },
  {
    name: 'X-Api-Key on a read route: GET /api/purchase-requests/{id}',
    floor: 'B',
    goal: 0.6,
    target: 'app',
    path: '/api/purchase-requests/{id}',
    expectStatus: 200,
    prepare: async (_baseUrl, seed) => ({
      path: `/api/purchase-requests/${seed.readablePurchaseRequest}`,
      headers: { 'x-api-key': seed.apiKey },
    }),
  },
  {
    name: 'POST /api/purchase-requests (create + ownership tuple)',
    floor: 'B',
    goal: 0.3,
    target: 'app',
    path: '/api/purchase-requests',
    method: 'POST',
    expectStatus: 201,
    prepare: async (baseUrl) => ({
      headers: { ...json, cookie: await userCookie(baseUrl) },
      body: JSON.stringify({ title: 'Benchmark chairs' }),
    }),
  },
  {
    name: 'GET /api/purchase-requests/{id} (can_view)',
    floor: 'B',
    goal: 0.6,
    target: 'app',
    path: '/api/purchase-requests/{id}',
    expectStatus: 200,
    prepare: async (baseUrl, seed) => ({
      path: `/api/purchase-requests/${seed.readablePurchaseRequest}`,
      headers: { cookie: await userCookie(baseUrl) },
    }),
  },
  {
    name: 'GET /api/purchase-requests, first page (20)',
    floor: 'B',
    goal: 0.5,
    target: 'app',
    path: '/api/purchase-requests',
    expectStatus: 200,
    prepare: async (baseUrl) => ({ headers: { cookie: await userCookie(baseUrl) } }),
  },
  {
    name: 'GET /api/purchase-requests, page 90% deep (keyset)',
    floor: 'B',
    goal: 0.5,
    target: 'app',
    path: '/api/purchase-requests',
    expectStatus: 200,
    prepare: async (baseUrl, seed) => ({
      path: `/api/purchase-requests?cursor=${seed.deepCursor}`,
      headers: { cookie: await userCookie(baseUrl) },
    }),
  },
  {
    name: 'POST /api/purchase-requests/{id}/submit (transition + audit row)',
    target: 'app',
    path: '/api/purchase-requests/{id}/submit',
    method: 'POST',
    expectStatus: 200,
    prepare: async (baseUrl, seed) => {
      const cookie = await userCookie(baseUrl)
      return {
        requests: [
          {
            setupRequest: (request) => ({
              ...request,
              path: `/api/purchase-requests/${seed.draftPool.shift()}/submit`,
              headers: { ...request.headers, cookie },
            }),
          },
        ],
      }
    },
  },
  {
    name: 'POST /api/storage/files (initiate: can_edit + pre-signed PUT)',
    target: 'app',
    path: '/api/storage/files',
    method: 'POST',
    expectStatus: 201,
    prepare: async (baseUrl, seed) => ({
      headers: { ...json, cookie: await userCookie(baseUrl) },
      body: JSON.stringify({
        resourceType: 'purchase_request',
        resourceId: seed.readablePurchaseRequest,
        fileName: 'quote.pdf',
        contentType: 'application/pdf',
      }),
    }),
  },
  {
    name: 'GET /api/storage/files/{id}/download-url (can_view + pre-signed GET)',
    target: 'app',
    path: '/api/storage/files/{id}/download-url',
    expectStatus: 200,
    prepare: async (baseUrl, seed) => ({
      path: `/api/storage/files/${seed.confirmedFileId}/download-url`,
      headers: { cookie: await userCookie(baseUrl) },
    }),
  },
  {
    name: `POST /api/auth/login (argon2id verify, ${LOGIN_CONNECTIONS} connections)`,
    floor: 'C',
    goal: 0.9,
    target: 'app',
    path: '/api/auth/login',
    method: 'POST',
    expectStatus: 200,
    prepare: async () => ({ headers: json, body: loginBody, connections: LOGIN_CONNECTIONS }),
  },
  {
    name: `POST /api/auth/login, unknown account (401, same argon2 work, ${LOGIN_CONNECTIONS} connections)`,
    floor: 'C',
    goal: 0.9,
    target: 'app',
    path: '/api/auth/login',
    method: 'POST',
    expectStatus: 401,
    prepare: async () => ({
      headers: json,
      body: JSON.stringify({ username: 'nobody@example.test', password: BENCH_USER.password }),
      connections: LOGIN_CONNECTIONS,
    }),
  },
  {
    name: 'POST /api/auth/password-reset/request, existing account (202)',
    target: 'app',
    path: '/api/auth/password-reset/request',
    method: 'POST',
    expectStatus: 202,
    prepare: async () => ({ headers: json, body: JSON.stringify({ email: BENCH_USER.email }) }),
  },
  {
    name: 'POST /api/auth/password-reset/request, unknown address (202)',
    target: 'app',
    path: '/api/auth/password-reset/request',
    method: 'POST',
    expectStatus: 202,
    prepare: async () => ({ headers: json, body: JSON.stringify({ email: 'nobody@example.test' }) }),
  },
  // Sign-up hashes the password for every address and answers before looking the address up: a
  // new address and one with an account should cost the same (the run prints their ratio).
  {
    name: `POST /api/auth/sign-up, existing account (202, argon2 hash, ${LOGIN_CONNECTIONS} connections)`,
    target: 'app',
    path: '/api/auth/sign-up',
    method: 'POST',
    expectStatus: 202,
    prepare: async () => ({
      headers: json,
      body: JSON.stringify({ ...signUpBody, email: BENCH_USER.email }),
      connections: LOGIN_CONNECTIONS,
    }),
  },
  {
    name: `POST /api/auth/sign-up, new address (202, argon2 hash, ${LOGIN_CONNECTIONS} connections)`,
    target: 'app',
    path: '/api/auth/sign-up',
    method: 'POST',
    expectStatus: 202,
    prepare: async () => ({
      headers: json,
      body: JSON.stringify({ ...signUpBody, email: 'newcomer@example.test' }),
      connections: LOGIN_CONNECTIONS,
    }),
  },
  {
    name: 'POST /api/auth/email-sign-in, existing account (202)',
    target: 'app',
    path: '/api/auth/email-sign-in',
    method: 'POST',
    expectStatus: 202,
    prepare: async () => ({ headers: json, body: JSON.stringify({ email: BENCH_USER.email }) }),
  },
  {
    name: 'POST /api/auth/email-sign-in, unknown address (202)',
    target: 'app',
    path: '/api/auth/email-sign-in',
    method: 'POST',
    expectStatus: 202,
    prepare: async () => ({ headers: json, body: JSON.stringify({ email: 'nobody@example.test' }) }),
  },
  {
    // Refresh tokens are single use: every request takes an unused token from a pool and its
    // response puts the successor back (autocannon resets per-request context, so the pool is shared).
    name: 'POST /api/auth/refresh (rotation)',
    floor: 'B',
    goal: 0.4,
    target: 'app',
    path: '/api/auth/refresh',
    method: 'POST',
    expectStatus: 200,
    prepare: async (baseUrl) => {
      const pool = await Promise.all(
        Array.from({ length: 2 * CONNECTIONS_MAX }, async () => (await login(baseUrl)).refresh),
      )
      return {
        requests: [
          {
            setupRequest: (request) => ({
              ...request,
              headers: { ...request.headers, cookie: `refresh_token=${pool.shift()}` },
            }),
            onResponse: (_status, _body, _context, headers) => {
              const next = setCookieFrom(headers).find((line) => /^refresh_token=[^;]/.test(line))
              if (next) pool.push(cookieValue(next, 'refresh_token'))
            },
          },
        ],
      }
    },
  },
  {
    // Each request: the admin's account read, the member's row locked, a session with its refresh
    // token, the admin's refresh token retired, the audit event and the member's mail, one transaction.
    name: 'POST /api/users/{id}/impersonation (start: session, audit event, mail)',
    target: 'app',
    path: '/api/users',
    method: 'POST',
    expectStatus: 200,
    prepare: async (baseUrl) => {
      const cookie = await userCookie(baseUrl)
      const res = await fetch(`${baseUrl}/api/users?limit=100`, { headers: { cookie } })
      const { items } = (await res.json()) as { items: { id: string; email: string }[] }
      const member = items.find((item) => item.email === BENCH_MEMBER.email)
      if (!member) throw new Error('no bench member to impersonate')
      return {
        path: `/api/users/${member.id}/impersonation`,
        headers: { ...json, cookie },
        body: JSON.stringify({ reason: 'bench: measuring the start of an impersonation' }),
      }
    },
  },
  {
    // The organization's policy is held in memory: the allowlist costs a CIDR check, no statement.
    name: 'GET /api/auth/sessions under an IP allowlist (cookie → principal → policy → one read)',
    floor: 'B',
    goal: 0.6,
    target: 'app',
    path: '/api/auth/sessions',
    expectStatus: 200,
    prepare: async (baseUrl) => {
      const body = JSON.stringify({ username: BENCH_ALLOWLIST_ADMIN.email, password: BENCH_USER.password })
      const cookie = `access_token=${(await login(baseUrl, body)).access}`
      const me = (await (await fetch(`${baseUrl}/api/auth/me`, { headers: { cookie } })).json()) as {
        organizationId: string
      }
      // The admin's role reaches the authorization server through its outbox: ask until it has.
      for (let attempt = 0; ; attempt++) {
        const put = await fetch(
          `${baseUrl}/api/organizations/${me.organizationId}/config/security.ip-allowlist`,
          {
            method: 'PUT',
            headers: { ...json, cookie },
            body: JSON.stringify({ value: '127.0.0.0/8, ::1/128' }),
          },
        )
        if (put.status === 200) break
        if (attempt > 50) throw new Error(`setting the bench allowlist failed: ${put.status}`)
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      return { headers: { cookie } }
    },
  },
]
