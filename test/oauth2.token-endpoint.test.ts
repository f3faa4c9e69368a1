import { randomUUID } from 'node:crypto'
import { createSigner } from 'fast-jwt'
import type { InjectOptions } from 'fastify'
import { exportPKCS8, generateKeyPair } from 'jose'
import { describe, expect, it } from 'vitest'
import { keyId } from '../src/security/tokens.ts'
import { FAST_LOGIN_CONFIG, signInNewUser } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { protectedTestRoutes } from './helpers/machines.ts'

// The OAuth 2.0 token endpoint (client credentials), introspection, the JWK set and discovery on
// an ES256 deployment: RFC 6749's answers and every error it names, the RFC 9068 token shape, the
// JSON endpoint's same token and shared rate limits, and HS256 tokens refused.

const { privateKey } = await generateKeyPair('ES256', { extractable: true })
const ISSUER = 'https://auth.example.test'

const t = useTestApp({
  config: {
    ...FAST_LOGIN_CONFIG,
    // Introspection then reports a user token whose sessions were ended as inactive.
    'platform.auth.session-version.enabled': 'true',
    'platform.auth.jwt.algorithm': 'ES256',
    'platform.auth.jwt.signing-key': await exportPKCS8(privateKey),
    'platform.auth.jwt.issuer': ISSUER,
    'platform.web.public-url': 'https://api.example.test',
    'platform.auth.rate-limit.service-token-per-minute': '4',
  },
  configure: protectedTestRoutes(),
})

// Each test its own client address, so only the rate-limit test meets the per-address limit.
let addressCount = 0
const nextAddress = () => `198.51.100.${++addressCount}`

async function newClient(
  scopes: string[] = ['files:read', 'purchase_requests:read'],
  clientId = `svc-${randomUUID()}`,
) {
  return t.app.services.serviceAccounts.create({ clientId, description: 'a backend', scopes })
}

const basic = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`

function post(
  url: string,
  form: Record<string, string>,
  options: Partial<InjectOptions> = {},
  address = nextAddress(),
) {
  return t.app.inject({
    method: 'POST',
    url,
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...options.headers },
    payload: new URLSearchParams(form).toString(),
    remoteAddress: address,
    ...(options.payload === undefined ? {} : { payload: options.payload }),
  })
}

const decode = (part: string | undefined) =>
  JSON.parse(Buffer.from(part ?? '', 'base64url').toString('utf8')) as Record<string, unknown>

/** POST /api/auth/service-token, the JSON endpoint, from an address of its own. */
const jsonServiceToken = (client: { clientId: string; clientSecret: string }) =>
  t.app.inject({
    method: 'POST',
    url: '/api/auth/service-token',
    payload: { clientId: client.clientId, clientSecret: client.clientSecret },
    remoteAddress: nextAddress(),
  })

const scoped = (token: string) =>
  t.app.inject({ method: 'GET', url: '/api/test/scoped', headers: { authorization: `Bearer ${token}` } })

function expectOAuthError(
  res: { statusCode: number; json(): unknown; headers: Record<string, unknown> },
  status: number,
  error: string,
) {
  expect(res.statusCode).toBe(status)
  expect(res.headers['content-type']).toMatch(/^application\/json/)
  expect(res.headers['cache-control']).toBe('no-store')
  expect(res.json()).toEqual({ error, error_description: expect.any(String) })
}

describe('POST /oauth2/token', () => {
  it('grants client_secret_basic a JWT access token per RFC 9068, signed ES256 with its kid, no-store', async () => {
    const client = await newClient()
    const res = await post(
      '/oauth2/token',
      { grant_type: 'client_credentials' },
      {
        headers: { authorization: basic(client.clientId, client.clientSecret) },
      },
    )
    expect(res.statusCode).toBe(200)
    expect(res.headers['cache-control']).toBe('no-store')
    expect(res.headers.pragma).toBe('no-cache')
    const body = res.json()
    expect(body).toEqual({
      access_token: expect.any(String),
      token_type: 'Bearer',
      expires_in: 720,
      scope: 'files:read purchase_requests:read',
    })
    const [header, payload] = body.access_token.split('.')
    const jwks = (await t.app.inject('/.well-known/jwks.json')).json()
    expect(decode(header)).toEqual({ alg: 'ES256', typ: 'at+jwt', kid: jwks.keys[0].kid })
    expect(decode(payload)).toEqual({
      iss: ISSUER,
      sub: client.id,
      aud: 'platform-service',
      exp: expect.any(Number),
      iat: expect.any(Number),
      jti: expect.stringMatching(/^[0-9a-f-]{36}$/),
      client_id: client.clientId,
      cid: client.clientId,
      scope: 'files:read purchase_requests:read',
    })
    const api = await scoped(body.access_token)
    expect(api.statusCode).toBe(200)
    expect(api.json()).toMatchObject({ type: 'SERVICE_ACCOUNT', id: client.id })
  })

  it('form-decodes Basic credentials (a client id with a colon, a secret with spaces encoded as +)', async () => {
    const client = await newClient(['files:read'], `team:svc.${randomUUID().slice(0, 8)}`)
    const raw = `${encodeURIComponent(client.clientId)}:${client.clientSecret}`
    expect(raw).toContain('%3A')
    const res = await post(
      '/oauth2/token',
      { grant_type: 'client_credentials' },
      {
        headers: { authorization: `Basic ${Buffer.from(raw).toString('base64')}` },
      },
    )
    expect(res.statusCode).toBe(200)
    expect(decode(res.json().access_token.split('.')[1]).client_id).toBe(client.clientId)
  })

  it('grants client_secret_post, and a requested subset of scopes only', async () => {
    const client = await newClient()
    const res = await post('/oauth2/token', {
      grant_type: 'client_credentials',
      client_id: client.clientId,
      client_secret: client.clientSecret,
      scope: 'files:read',
    })
    expect(res.statusCode).toBe(200)
    expect(res.json().scope).toBe('files:read')
    expect(decode(res.json().access_token.split('.')[1]).scope).toBe('files:read')
    expect((await scoped(res.json().access_token)).json().scopes).toEqual(['files:read'])
  })

  it('issues the same kind of token from POST /api/auth/service-token', async () => {
    const client = await newClient()
    const res = await jsonServiceToken(client)
    expect(res.statusCode).toBe(200)
    const [header, payload] = res.json().accessToken.split('.')
    expect(decode(header)).toMatchObject({ alg: 'ES256', typ: 'at+jwt' })
    expect(decode(payload)).toMatchObject({
      client_id: client.clientId,
      sub: client.id,
      jti: expect.any(String),
    })
  })

  it('answers invalid_client 401 with WWW-Authenticate Basic for a wrong Basic secret or unknown client', async () => {
    const client = await newClient()
    for (const authorization of [
      basic(client.clientId, `${client.clientSecret}x`),
      basic('nobody', client.clientSecret),
    ]) {
      const res = await post(
        '/oauth2/token',
        { grant_type: 'client_credentials' },
        { headers: { authorization } },
      )
      expectOAuthError(res, 401, 'invalid_client')
      expect(res.headers['www-authenticate']).toMatch(/^Basic realm=/)
    }
  })

  it('answers invalid_client 401 without WWW-Authenticate for wrong form credentials or none at all', async () => {
    const client = await newClient()
    const wrong = await post('/oauth2/token', {
      grant_type: 'client_credentials',
      client_id: client.clientId,
      client_secret: 'not-it',
    })
    expectOAuthError(wrong, 401, 'invalid_client')
    expect(wrong.headers['www-authenticate']).toBeUndefined()
    const none = await post('/oauth2/token', { grant_type: 'client_credentials' })
    expectOAuthError(none, 401, 'invalid_client')
  })

  it('answers unauthorized_client to a disabled client presenting its right secret', async () => {
    const client = await newClient()
    await t.app.services.serviceAccounts.disable(client.clientId)
    const res = await post(
      '/oauth2/token',
      { grant_type: 'client_credentials' },
      {
        headers: { authorization: basic(client.clientId, client.clientSecret) },
      },
    )
    expectOAuthError(res, 400, 'unauthorized_client')
  })

  it('answers unsupported_grant_type for any other grant', async () => {
    const client = await newClient()
    for (const grant_type of ['password', 'authorization_code', 'refresh_token']) {
      const res = await post(
        '/oauth2/token',
        { grant_type },
        {
          headers: { authorization: basic(client.clientId, client.clientSecret) },
        },
      )
      expectOAuthError(res, 400, 'unsupported_grant_type')
    }
  })

  it('answers invalid_scope for a scope the client does not hold or a malformed one', async () => {
    const client = await newClient(['files:read'])
    for (const scope of ['files:read files:write', 'audit:read', 'files:read "x"']) {
      const res = await post(
        '/oauth2/token',
        { grant_type: 'client_credentials', scope },
        {
          headers: { authorization: basic(client.clientId, client.clientSecret) },
        },
      )
      expectOAuthError(res, 400, 'invalid_scope')
    }
  })

  it('answers invalid_request for a missing grant_type, both methods at once, a repeated parameter, a JSON body', async () => {
    const client = await newClient()
    const auth = { authorization: basic(client.clientId, client.clientSecret) }
    expectOAuthError(await post('/oauth2/token', {}, { headers: auth }), 400, 'invalid_request')
    expectOAuthError(
      await post(
        '/oauth2/token',
        { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret },
        { headers: auth },
      ),
      400,
      'invalid_request',
    )
    expectOAuthError(
      await post(
        '/oauth2/token',
        {},
        { headers: auth, payload: 'grant_type=client_credentials&grant_type=client_credentials' },
      ),
      400,
      'invalid_request',
    )
    const json = await t.app.inject({
      method: 'POST',
      url: '/oauth2/token',
      headers: auth,
      payload: { grant_type: 'client_credentials' },
      remoteAddress: nextAddress(),
    })
    expectOAuthError(json, 400, 'invalid_request')
    const text = await t.app.inject({
      method: 'POST',
      url: '/oauth2/token',
      headers: { ...auth, 'content-type': 'text/plain' },
      payload: 'grant_type=client_credentials',
      remoteAddress: nextAddress(),
    })
    expectOAuthError(text, 400, 'invalid_request')
  })

  it('shares the JSON endpoint’s per-client allowance, answering 429 with Retry-After in the RFC shape', async () => {
    const client = await newClient()
    for (let i = 0; i < 2; i++) {
      expect((await jsonServiceToken(client)).statusCode).toBe(200)
    }
    const auth = { authorization: basic(client.clientId, client.clientSecret) }
    for (let i = 0; i < 2; i++) {
      expect(
        (await post('/oauth2/token', { grant_type: 'client_credentials' }, { headers: auth })).statusCode,
      ).toBe(200)
    }
    const limited = await post('/oauth2/token', { grant_type: 'client_credentials' }, { headers: auth })
    expectOAuthError(limited, 429, 'temporarily_unavailable')
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0)
  })

  it('refuses an HS256 token signed with the deployment secret once signing is asymmetric', async () => {
    const client = await newClient()
    const secret = Buffer.from(t.config.auth.jwt.secret, 'base64')
    const now = Math.floor(t.clock.now().getTime() / 1000)
    const forged = createSigner({ key: secret, algorithm: 'HS256', kid: keyId(secret) })({
      iss: ISSUER,
      aud: 'platform-service',
      sub: client.id,
      cid: client.clientId,
      scope: 'files:read',
      iat: now,
      exp: now + 60,
    })
    expect((await scoped(forged)).statusCode).toBe(401)
  })
})

describe('POST /oauth2/introspect', () => {
  async function introspector() {
    const client = await newClient(['tokens:introspect'])
    return { authorization: basic(client.clientId, client.clientSecret) }
  }

  async function tokenOf(client: { clientId: string; clientSecret: string }) {
    const res = await post(
      '/oauth2/token',
      { grant_type: 'client_credentials' },
      {
        headers: { authorization: basic(client.clientId, client.clientSecret) },
      },
    )
    return res.json().access_token as string
  }

  it('describes an active service token: sub, client_id, scope, exp, iat, iss, token_type', async () => {
    const headers = await introspector()
    const client = await newClient()
    const token = await tokenOf(client)
    const res = await post('/oauth2/introspect', { token }, { headers })
    expect(res.statusCode).toBe(200)
    expect(res.headers['cache-control']).toBe('no-store')
    const claims = decode(token.split('.')[1])
    expect(res.json()).toEqual({
      active: true,
      sub: client.id,
      client_id: client.clientId,
      scope: 'files:read purchase_requests:read',
      exp: claims.exp,
      iat: claims.iat,
      iss: ISSUER,
      aud: 'platform-service',
      jti: claims.jti,
      token_type: 'Bearer',
    })
  })

  it('answers {active: false} for garbage, an expired token and a disabled account’s token', async () => {
    const headers = await introspector()
    const client = await newClient()
    const token = await tokenOf(client)
    expect((await post('/oauth2/introspect', { token: 'not.a.token' }, { headers })).json()).toEqual({
      active: false,
    })
    await t.app.services.serviceAccounts.disable(client.clientId)
    expect((await post('/oauth2/introspect', { token }, { headers })).json()).toEqual({ active: false })
    const other = await tokenOf(await newClient())
    t.clock.advance(721_000)
    try {
      expect(
        (await post('/oauth2/introspect', { token: other }, { headers: await introspector() })).json(),
      ).toEqual({
        active: false,
      })
    } finally {
      t.clock.advance(-721_000)
    }
  })

  it('accepts the caller’s bearer token and form credentials as its authentication', async () => {
    const caller = await newClient(['tokens:introspect'])
    const token = await tokenOf(await newClient())
    const bearer = await post(
      '/oauth2/introspect',
      { token },
      { headers: { authorization: `Bearer ${await tokenOf(caller)}` } },
    )
    expect(bearer.json()).toMatchObject({ active: true })
    const form = await post('/oauth2/introspect', {
      token,
      client_id: caller.clientId,
      client_secret: caller.clientSecret,
    })
    expect(form.json()).toMatchObject({ active: true })
  })

  it('describes a user’s access token with its organization, and finds it inactive once the sessions end', async () => {
    const headers = await introspector()
    const session = await signInNewUser(t.app)
    const active = await post('/oauth2/introspect', { token: session.access }, { headers })
    expect(active.json()).toMatchObject({
      active: true,
      sub: session.userId,
      org: session.organizationId,
      aud: 'platform-user',
      iss: ISSUER,
    })
    expect(active.json().client_id).toBeUndefined()
    const ended = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout-all',
      cookies: { access_token: session.access },
    })
    expect(ended.statusCode).toBeLessThan(300)
    expect((await post('/oauth2/introspect', { token: session.access }, { headers })).json()).toEqual({
      active: false,
    })
  })

  it('answers 401 invalid_client without client authentication or with a wrong secret', async () => {
    const token = await tokenOf(await newClient())
    expectOAuthError(await post('/oauth2/introspect', { token }), 401, 'invalid_client')
    const wrong = await post(
      '/oauth2/introspect',
      { token },
      { headers: { authorization: basic('nobody', 'x') } },
    )
    expectOAuthError(wrong, 401, 'invalid_client')
    expect(wrong.headers['www-authenticate']).toMatch(/^Basic/)
  })

  it('answers 403 insufficient_scope to a client without tokens:introspect, and 400 without a token', async () => {
    const client = await newClient(['files:read'])
    const token = await tokenOf(client)
    expectOAuthError(
      await post(
        '/oauth2/introspect',
        { token },
        { headers: { authorization: basic(client.clientId, client.clientSecret) } },
      ),
      403,
      'insufficient_scope',
    )
    expectOAuthError(
      await post('/oauth2/introspect', {}, { headers: await introspector() }),
      400,
      'invalid_request',
    )
  })
})

describe('logs', () => {
  it('never hold a client secret or an issued token, however the client authenticated', async () => {
    const client = await newClient(['files:read', 'tokens:introspect'])
    const viaBasic = await post(
      '/oauth2/token',
      { grant_type: 'client_credentials' },
      { headers: { authorization: basic(client.clientId, client.clientSecret) } },
    )
    const viaForm = await post('/oauth2/token', {
      grant_type: 'client_credentials',
      client_id: client.clientId,
      client_secret: client.clientSecret,
    })
    await post('/oauth2/introspect', {
      token: viaBasic.json().access_token,
      client_id: client.clientId,
      client_secret: client.clientSecret,
    })
    await post('/oauth2/token', {
      grant_type: 'client_credentials',
      client_id: client.clientId,
      client_secret: 'wrong-secret-x',
    })
    const logs = t.logs.text()
    expect(logs).toContain('/oauth2/token')
    for (const secret of [
      client.clientSecret,
      viaBasic.json().access_token,
      viaForm.json().access_token,
      'wrong-secret-x',
    ])
      expect(logs).not.toContain(secret)
  })
})

describe('GET /.well-known/*', () => {
  it('publishes the public key only (no d, p, q), with caching headers', async () => {
    const res = await t.app.inject('/.well-known/jwks.json')
    expect(res.statusCode).toBe(200)
    expect(res.headers['cache-control']).toBe('public, max-age=300')
    const { keys } = res.json()
    expect(keys).toHaveLength(1)
    expect(keys[0]).toEqual({
      kty: 'EC',
      crv: 'P-256',
      x: expect.any(String),
      y: expect.any(String),
      kid: expect.any(String),
      alg: 'ES256',
      use: 'sig',
    })
    for (const member of ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k']) expect(res.body).not.toContain(`"${member}"`)
  })

  it('serves RFC 8414 metadata and the OpenID discovery document with the configured issuer', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const res = await t.app.inject(path)
      expect(res.statusCode).toBe(200)
      expect(res.json()).toMatchObject({
        issuer: ISSUER,
        token_endpoint: 'https://api.example.test/oauth2/token',
        jwks_uri: 'https://api.example.test/.well-known/jwks.json',
        introspection_endpoint: 'https://api.example.test/oauth2/introspect',
        grant_types_supported: ['client_credentials'],
        token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
        scopes_supported: expect.arrayContaining(['files:read', 'tokens:introspect']),
      })
    }
  })
})
