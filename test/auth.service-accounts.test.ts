import { createHash, randomUUID } from 'node:crypto'
import { validate } from '@readme/openapi-parser'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance, InjectOptions } from 'fastify'
import { describe, expect, it } from 'vitest'
import { requireTenant } from '../src/context.ts'
import { UUID, userAccessToken } from './helpers/accounts.ts'
import { createTestApp, useTestApp } from './helpers/app.ts'
import { filesReadRoute, protectedTestRoutes } from './helpers/machines.ts'

// Service accounts over HTTP: the client-credentials grant, the bearer token it issues, the
// SERVICE_ACCOUNT principal without an organization, scopes, and the OpenAPI security derived
// from each route's config.

// The protected test scope, and a tenant route that needs the current organization.
const testRoutes = protectedTestRoutes((feature) => {
  feature.get(
    '/api/test/tenant',
    filesReadRoute('testTenant', { response: { 200: Type.Object({ organizationId: Type.String() }) } }),
    async () => ({ organizationId: requireTenant() }),
  )
})

// Rate limits are raised on the shared app so that only the rate-limit test meets them.
const t = useTestApp({
  config: {
    'platform.auth.rate-limit.login-per-minute': '1000',
    'platform.auth.rate-limit.service-token-per-minute': '1000',
  },
  configure: testRoutes,
})

let clientCount = 0
async function newServiceAccount(scopes: string[] = ['files:read']) {
  clientCount += 1
  return t.app.services.serviceAccounts.create({
    clientId: `backend-${clientCount}`,
    description: 'a backend',
    scopes,
  })
}

function serviceToken(app: FastifyInstance, payload: object, options: Partial<InjectOptions> = {}) {
  return app.inject({ method: 'POST', url: '/api/auth/service-token', payload, ...options })
}

async function tokenFor(account: { clientId: string; clientSecret: string }): Promise<string> {
  const res = await serviceToken(t.app, { clientId: account.clientId, clientSecret: account.clientSecret })
  expect(res.statusCode).toBe(200)
  return res.json().accessToken
}

const withBearer = (url: string, token: string) =>
  t.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } })

const claims = (jwt: string) =>
  JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')) as Record<string, unknown>

describe('POST /api/auth/service-token', () => {
  it('issues a 720-second bearer JWT with the service audience, the account as subject and its scopes', async () => {
    const account = await newServiceAccount(['purchase_requests:read', 'files:read'])
    expect(account).toEqual({
      id: expect.stringMatching(UUID),
      clientId: account.clientId,
      clientSecret: expect.stringMatching(/^[A-Za-z0-9_-]{43,}$/),
    })

    const res = await serviceToken(t.app, { clientId: account.clientId, clientSecret: account.clientSecret })
    expect(res.statusCode).toBe(200)
    expect(res.headers['cache-control']).toBe('no-store')
    const body = res.json()
    expect(body).toEqual({ accessToken: expect.any(String), tokenType: 'Bearer', expiresInSeconds: 720 })

    const payload = claims(body.accessToken)
    expect(payload).toMatchObject({
      aud: 'platform-service',
      iss: 'platform-core-auth',
      sub: account.id,
      cid: account.clientId,
    })
    expect((payload.exp as number) - (payload.iat as number)).toBe(720)
    expect(payload.iat).toBe(Math.floor(t.clock.now().getTime() / 1000))
    expect(String(payload.scope).split(' ').sort()).toEqual(['files:read', 'purchase_requests:read'])
  })

  it('stores only the SHA-256 of the client secret', async () => {
    const account = await newServiceAccount()
    const row = await t.app.db
      .selectFrom('service_accounts')
      .selectAll()
      .where('id', '=', account.id)
      .executeTakeFirstOrThrow()
    expect(row.secret_hash).toBe(createHash('sha256').update(account.clientSecret).digest('hex'))
    expect(JSON.stringify(row)).not.toContain(account.clientSecret)
  })

  it('refuses a clientId that is taken with 409 ACCOUNT_EXISTS, the first account unchanged', async () => {
    const account = await newServiceAccount()
    await expect(
      t.app.services.serviceAccounts.create({
        clientId: account.clientId,
        description: 'a second one',
        scopes: ['files:read'],
      }),
    ).rejects.toMatchObject({ code: 'ACCOUNT_EXISTS', status: 409 })
    expect(await tokenFor(account)).toEqual(expect.any(String))
  })

  it('answers a wrong secret, an unknown client and a disabled account with the same 401', async () => {
    const account = await newServiceAccount()
    const disabled = await newServiceAccount()
    await t.app.services.serviceAccounts.disable(disabled.clientId)

    const responses = [
      await serviceToken(t.app, { clientId: account.clientId, clientSecret: `${account.clientSecret}x` }),
      await serviceToken(t.app, { clientId: 'nobody-here', clientSecret: account.clientSecret }),
      await serviceToken(t.app, { clientId: disabled.clientId, clientSecret: disabled.clientSecret }),
    ]
    const [first] = responses
    expect(first?.json()).toMatchObject({ code: 'INVALID_CREDENTIALS', status: 401 })
    for (const res of responses) {
      expect(res.statusCode).toBe(401)
      expect(res.headers['content-type']).toBe(first?.headers['content-type'])
      expect(res.json()).toEqual(first?.json())
      expect(res.body).not.toMatch(/accessToken/)
    }
  })

  it('rejects a body without clientId or clientSecret with 400 VALIDATION_FAILED', async () => {
    for (const payload of [{ clientId: 'backend-x' }, { clientSecret: 'secret' }, {}]) {
      const res = await serviceToken(t.app, payload)
      expect(res.statusCode).toBe(400)
      expect(res.json()).toMatchObject({ code: 'VALIDATION_FAILED' })
    }
  })

  it('limits attempts per IP and per client with 429 RATE_LIMITED and Retry-After', async () => {
    const account = await newServiceAccount()
    const limited = await createTestApp({
      database: t.database,
      config: { 'platform.auth.rate-limit.service-token-per-minute': '3' },
    })
    try {
      const from = (remoteAddress: string, clientSecret: string) =>
        serviceToken(limited.app, { clientId: account.clientId, clientSecret }, { remoteAddress })
      for (let attempt = 0; attempt < 3; attempt++) {
        expect((await from('203.0.113.7', 'wrong secret')).statusCode).toBe(401)
      }
      // The limit is checked first: even the right secret is refused now.
      const blocked = await from('203.0.113.7', account.clientSecret)
      expect(blocked.statusCode).toBe(429)
      expect(blocked.json()).toMatchObject({ code: 'RATE_LIMITED' })
      const retryAfter = Number(blocked.headers['retry-after'])
      expect(retryAfter).toBeGreaterThanOrEqual(1)
      expect(retryAfter).toBeLessThanOrEqual(60)

      // Another address is still refused: the client id has used its attempts too.
      expect((await from('203.0.113.8', account.clientSecret)).statusCode).toBe(429)
    } finally {
      await limited.close()
    }
  })
})

describe('service bearer tokens', () => {
  it('authenticate a SERVICE_ACCOUNT principal without an organization', async () => {
    const account = await newServiceAccount(['files:read', 'files:write'])
    const res = await withBearer('/api/test/scoped', await tokenFor(account))
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      type: 'SERVICE_ACCOUNT',
      id: account.id,
      organizationId: null,
      scopes: ['files:read', 'files:write'],
    })
  })

  it('answer 403 ORGANIZATION_REQUIRED where the current organization is needed', async () => {
    const res = await withBearer('/api/test/tenant', await tokenFor(await newServiceAccount()))
    expect(res.statusCode).toBe(403)
    expect(res.json()).toMatchObject({ code: 'ORGANIZATION_REQUIRED' })
  })

  it('answer 403 INSUFFICIENT_SCOPE on a route needing a scope the account lacks', async () => {
    const token = await tokenFor(await newServiceAccount(['purchase_requests:read']))
    const res = await withBearer('/api/test/scoped', token)
    expect(res.statusCode).toBe(403)
    expect(res.json()).toMatchObject({ code: 'INSUFFICIENT_SCOPE' })
  })

  it('answer 403 INSUFFICIENT_SCOPE on routes for signed-in users only', async () => {
    const res = await withBearer('/api/auth/sessions', await tokenFor(await newServiceAccount()))
    expect(res.statusCode).toBe(403)
    expect(res.json()).toMatchObject({ code: 'INSUFFICIENT_SCOPE' })
  })

  it('are never accepted from the access cookie', async () => {
    const token = await tokenFor(await newServiceAccount())
    const res = await t.app.inject({
      method: 'GET',
      url: '/api/test/scoped',
      cookies: { access_token: token },
    })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })

  it('are the only bearer tokens: a valid user access token sent as Bearer is refused', async () => {
    const organizationId = randomUUID()
    const userToken = userAccessToken(t.app, organizationId)
    const asCookie = await t.app.inject({
      method: 'GET',
      url: '/api/test/scoped',
      cookies: { access_token: userToken },
    })
    expect(asCookie.json()).toMatchObject({ type: 'USER', organizationId })

    const res = await withBearer('/api/test/scoped', userToken)
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })

  it('refuse Basic authorization, even with the right client credentials', async () => {
    const account = await newServiceAccount()
    const basic = Buffer.from(`${account.clientId}:${account.clientSecret}`).toString('base64')
    const res = await t.app.inject({
      method: 'GET',
      url: '/api/test/scoped',
      headers: { authorization: `Basic ${basic}` },
    })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })

  it('stop working at once on the instance that disables the account', async () => {
    const account = await newServiceAccount()
    const token = await tokenFor(account)
    expect((await withBearer('/api/test/scoped', token)).statusCode).toBe(200)

    await t.app.services.serviceAccounts.disable(account.clientId)
    const res = await withBearer('/api/test/scoped', token)
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })

  it('expire after the access-token lifetime', async () => {
    const token = await tokenFor(await newServiceAccount())
    t.clock.advanceSeconds(719)
    expect((await withBearer('/api/test/scoped', token)).statusCode).toBe(200)
    t.clock.advanceSeconds(2)
    const res = await withBearer('/api/test/scoped', token)
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })
})

describe('OpenAPI security of machine-callable routes', () => {
  it('derives each operation security from the route config, and the document stays valid', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/v3/api-docs' })
    expect(res.statusCode).toBe(200)
    const document = res.json()
    expect(document.paths['/api/auth/service-token'].post.security).toEqual([])
    expect(document.paths['/api/auth/login'].post.security).toEqual([])
    expect(document.paths['/api/auth/sessions'].get.security).toEqual([{ accessCookie: [] }])
    const scoped = document.paths['/api/test/scoped'].get
    expect(scoped.security).toEqual([
      { accessCookie: [] },
      { bearerAuth: ['files:read'] },
      { apiKey: ['files:read'] },
    ])
    expect(scoped['x-required-scope']).toBe('files:read')
    expect(document.paths['/api/auth/sessions'].get['x-required-scope']).toBeUndefined()

    const result = await validate(structuredClone(document))
    expect(result).toMatchObject({ valid: true, warnings: [] })
  })
})
