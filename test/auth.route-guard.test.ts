import { randomUUID } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { beforeAll, describe, expect, it } from 'vitest'
import { SCOPES } from '../src/scopes.ts'
import { FAST_LOGIN_CONFIG, newUser, signIn } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { newDeliveredApiKey, serviceBearer } from './helpers/machines.ts'

// The guard decides from the route the router matched, never from the request text. The
// router decodes percent-encoded paths and accepts absolute-form request targets, so every
// spelling of a route's path must meet the same rule: for every registered route and every kind
// of principal, the plain path, its percent-encoded variants and the absolute-form target give the
// same answer. Sent over a real socket, because inject normalises the target.

const t = useTestApp({
  config: {
    ...FAST_LOGIN_CONFIG,
    'platform.auth.rate-limit.refresh-per-minute': '100000',
    'platform.auth.rate-limit.reset-per-hour': '100000',
    'platform.auth.rate-limit.passkey-options-per-minute': '100000',
    'platform.auth.rate-limit.email-proof-per-minute': '100000',
    'platform.auth.rate-limit.email-proof-per-hour': '100000',
    // Switched off, sign-up and email sign-in answer 404 before the guard's question arises.
    'platform.auth.sign-up.enabled': 'true',
    'platform.auth.email-sign-in.enabled': 'true',
  },
})

interface Route {
  method: string
  path: string
}

/** Every method and path of the app's route table, from Fastify's own printout of its router. */
function registeredRoutes(): Route[] {
  const routes: Route[] = []
  const parents: string[] = []
  for (const line of t.app.printRoutes({ commonPrefix: false }).split('\n')) {
    const branch = line.search(/[├└]── /)
    if (branch < 0) continue
    const depth = branch / 4
    const match = /^(\S+)(?: \(([A-Z, ]+)\))?$/.exec(line.slice(branch + 4).trim())
    if (!match?.[1]) continue
    const parent = parents[depth - 1] ?? ''
    // The printout folds a lone '/' into the parameter or wildcard node below it.
    const joint = /^[:*]/.test(match[1]) && !parent.endsWith('/') ? '/' : ''
    const path = parent + joint + match[1]
    parents[depth] = path
    parents.length = depth + 1
    for (const method of match[2]?.split(', ') ?? []) routes.push({ method, path })
  }
  return routes
}

interface Answer {
  status: number
  code: string | undefined
}

let port = 0
function send(method: string, target: string, headers: Record<string, string>): Promise<Answer> {
  const body = method === 'POST' || method === 'PUT' ? '{}' : undefined
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: target,
        headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
      },
      (response) => {
        let text = ''
        response.setEncoding('utf8')
        response.on('data', (chunk: string) => {
          text += chunk
        })
        response.on('end', () => {
          let code: string | undefined
          // HEAD answers carry no body: their status alone is compared.
          if (text && /problem\+json/.test(response.headers['content-type'] ?? ''))
            code = JSON.parse(text).code
          resolve({ status: response.statusCode ?? 0, code })
        })
      },
    )
    request.on('error', reject)
    request.end(body)
  })
}

const encodeChar = (c: string) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`

/** The same path spelled differently: each static segment with a letter percent-encoded, and absolute-form. */
function spellings(path: string): string[] {
  const segments = path.split('/')
  const variants = new Set<string>()
  segments.forEach((segment, i) => {
    const letter = segment.search(/[a-z]/)
    if (letter < 0) return
    for (const encoded of [
      encodeChar(segment[letter] as string),
      encodeChar(segment[letter] as string).toUpperCase(),
    ]) {
      const copy = [...segments]
      copy[i] = segment.slice(0, letter) + encoded + segment.slice(letter + 1)
      variants.add(copy.join('/'))
    }
  })
  variants.add(`http://127.0.0.1:${port}${path}`)
  variants.add(`http://attacker.example${path}`)
  return [...variants]
}

describe('route guard', () => {
  const principals: Record<string, Record<string, string>> = {}
  let organizationId = ''

  beforeAll(async () => {
    await t.app.listen({ host: '127.0.0.1', port: 0 })
    port = (t.app.server.address() as AddressInfo).port
    const user = await newUser(t.app)
    organizationId = user.organizationId
    const other = await newUser(t.app)
    const cookieOf = async (u: typeof user) => `access_token=${(await signIn(t.app, u)).access}`
    principals.none = {}
    principals.user = { cookie: await cookieOf(user) }
    principals['user of another organization'] = { cookie: await cookieOf(other) }
    principals['API key with every scope'] = (
      await newDeliveredApiKey(t.app, organizationId, [...SCOPES])
    ).headers
    principals['API key without scopes'] = (await newDeliveredApiKey(t.app, organizationId, [])).headers
    principals['service account with every scope'] = await serviceBearer(t.app, [...SCOPES])
    principals['service account without scopes'] = await serviceBearer(t.app, [])
  })

  /** A concrete path: ids are unknown UUIDs, the organization is the user's own. */
  const concrete = (path: string) =>
    path
      .replace(':orgId', organizationId)
      .replace(/:[A-Za-z]+/g, () => randomUUID())
      .replace(/^\/docs\/\*$/, '/docs/static/swagger-ui.css')
      .replace(/\*$/, 'some.key')

  it('walks a route table that holds every feature', () => {
    const paths = new Set(registeredRoutes().map((r) => r.path))
    for (const path of [
      '/health/live',
      '/api/auth/login',
      '/api/purchase-requests/:id/approve',
      '/api/organizations/:orgId/config/:key',
      '/api/storage/files/:fileId/confirm',
      '/api/users/:id/deactivate',
    ]) {
      expect(paths).toContain(path)
    }
  })

  it('gives every spelling of every route the answer of its plain path, for every kind of principal', async () => {
    const mismatches: string[] = []
    let compared = 0
    for (const route of registeredRoutes()) {
      const path = concrete(route.path)
      for (const [name, headers] of Object.entries(principals)) {
        const plain = await send(route.method, path, headers)
        for (const variant of spellings(path)) {
          const answer = await send(route.method, variant, headers)
          compared++
          // Swagger UI's static files are looked up from the raw URL by @fastify/static: a
          // respelled file name is simply not found. Public either way, and never more open.
          const staticFile = route.path.startsWith('/docs/') && answer.status === 404
          if (!staticFile && (answer.status !== plain.status || answer.code !== plain.code)) {
            mismatches.push(
              `${name}: ${route.method} ${variant} -> ${answer.status} ${answer.code}, plain -> ${plain.status} ${plain.code}`,
            )
          }
        }
      }
    }
    expect(mismatches).toEqual([])
    expect(compared).toBeGreaterThan(1000)
  }, 120_000)

  // What is open without credentials: the public auth endpoints, health, the console, metrics and
  // the API documentation. Everything else is closed.
  const PUBLIC = [
    /^\/api\/auth\/(login|refresh|logout|service-token|password-reset\/request|password-reset\/confirm)$/,
    /^\/api\/auth\/passkeys\/authentication(\/options)?$/,
    /^\/api\/auth\/(sign-up|email-sign-in)(\/verify)?$/,
    // Sign-in with OpenID Connect providers: the list, a flow's start, the callback, the second factor.
    /^\/api\/auth\/oidc\/(providers|:providerId\/start|callback|second-factor)$/,
    // Identity-first SSO: an address's organization connection.
    /^\/api\/auth\/sso\/start$/,
    // The console's pages that mailed links open.
    /^\/(accept-invitation|reset-password|verify-sign-up|email-sign-in|verify-email)$/,
    /^\/health\/(live|ready)$/,
    /^\/$/,
    /^\/metrics$/,
    /^\/v3\/api-docs$/,
    /^\/docs(\/.*)?$/,
    // OAuth 2.0 for machines: the client authenticates in the request itself; keys and metadata are public.
    /^\/oauth2\/(token|introspect)$/,
    /^\/\.well-known\/(jwks\.json|oauth-authorization-server|openid-configuration)$/,
  ]
  const isPublic = (path: string) => PUBLIC.some((pattern) => pattern.test(path))

  it('closes every non-public route to callers without credentials and to machine principals without its scope', async () => {
    const leaks: string[] = []
    for (const route of registeredRoutes()) {
      const path = concrete(route.path)
      for (const name of ['none', 'API key without scopes', 'service account without scopes']) {
        const expected = name === 'none' ? 401 : 403
        for (const target of [path, ...spellings(path)]) {
          const answer = await send(route.method, target, principals[name] ?? {})
          const closed =
            answer.status === expected &&
            (answer.code === undefined ||
              answer.code === (expected === 401 ? 'AUTHENTICATION_REQUIRED' : 'INSUFFICIENT_SCOPE'))
          if (closed === isPublic(route.path))
            leaks.push(`${name}: ${route.method} ${target} -> ${answer.status} ${answer.code}`)
        }
      }
    }
    expect(leaks).toEqual([])
  }, 120_000)

  it('lets a machine principal holding every scope reach exactly the routes whose documented operation names a scope', async () => {
    const document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    const wrong: string[] = []
    let scoped = 0
    for (const route of registeredRoutes()) {
      if (isPublic(route.path) || route.method === 'HEAD') continue
      const openapiPath = route.path.replace(/:([A-Za-z]+)/g, '{$1}')
      const operation = document.paths[openapiPath]?.[route.method.toLowerCase()]
      if (!operation) continue
      const scope = operation['x-required-scope'] as string | undefined
      if (scope) scoped++
      for (const name of ['API key with every scope', 'service account with every scope']) {
        const answer = await send(route.method, concrete(route.path), principals[name] ?? {})
        if ((answer.code === 'INSUFFICIENT_SCOPE') !== !scope)
          wrong.push(`${name}: ${route.method} ${route.path} (${scope}) -> ${answer.code}`)
      }
    }
    expect(wrong).toEqual([])
    expect(scoped).toBeGreaterThan(10)
  })

  it('answers 401 to an unauthenticated caller on unknown paths, however they are spelled', async () => {
    for (const target of [
      '/api/nothing-here',
      '/%61pi/nothing-here',
      '/nothing-here',
      'http://x.example/api/none',
    ]) {
      expect((await send('GET', target, {})).code, target).toBe('AUTHENTICATION_REQUIRED')
    }
    expect((await send('GET', '/api/nothing-here', principals.user ?? {})).status).toBe(404)
  })
})
