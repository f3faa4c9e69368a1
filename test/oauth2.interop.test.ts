import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { createRemoteJWKSet, exportPKCS8, generateKeyPair, jwtVerify, SignJWT } from 'jose'
import * as oidc from 'openid-client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { systemClock } from '../src/clock.ts'
import { freePort } from '../src/lifecycle.ts'
import { useTestApp } from './helpers/app.ts'
import { protectedTestRoutes } from './helpers/machines.ts'

// Third-party OAuth 2.0 software, not the project's own code, against the service on a real
// socket: openid-client (discovery, the client-credentials grant, introspection), a resource
// server that verifies tokens with jose's remote JWK set alone, and a Go program built here from
// its modules (golang.org/x/oauth2/clientcredentials, github.com/coreos/go-oidc/v3).

const run = promisify(execFile)
const port = await freePort()
const base = `http://127.0.0.1:${port}`
const { privateKey } = await generateKeyPair('ES256', { extractable: true })

const t = useTestApp({
  config: {
    'platform.auth.jwt.algorithm': 'ES256',
    'platform.auth.jwt.signing-key': await exportPKCS8(privateKey),
    'platform.auth.jwt.issuer': base,
    'platform.web.public-url': base,
    'platform.auth.rate-limit.service-token-per-minute': '100',
  },
  configure: protectedTestRoutes(),
  // Third-party verifiers check expiry against the real time.
  clock: systemClock,
})

/** A resource server of another team: it knows the issuer's URL and nothing else. */
let resourceServer: http.Server
let resourceUrl = ''
beforeAll(async () => {
  await t.app.listen({ host: '127.0.0.1', port })
  const jwks = createRemoteJWKSet(new URL(`${base}/.well-known/jwks.json`))
  resourceServer = http.createServer((request, response) => {
    const token = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1] ?? ''
    jwtVerify(token, jwks, { issuer: base, audience: 'platform-service', typ: 'at+jwt' }).then(
      ({ payload }) =>
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(payload)),
      () => response.writeHead(401).end(),
    )
  })
  await new Promise<void>((resolve) => resourceServer.listen(0, '127.0.0.1', resolve))
  resourceUrl = `http://127.0.0.1:${(resourceServer.address() as AddressInfo).port}/`
})
afterAll(
  () => new Promise<void>((resolve) => (resourceServer ? resourceServer.close(() => resolve()) : resolve())),
)

async function newClient(scopes: string[]) {
  return t.app.services.serviceAccounts.create({
    clientId: `svc-${crypto.randomUUID()}`,
    description: 'a backend',
    scopes,
  })
}

const insecure = { execute: [oidc.allowInsecureRequests] }

/** openid-client's configuration from the discovery document, authenticating with HTTP Basic. */
const discoverWithBasic = (client: { clientId: string; clientSecret: string }) =>
  oidc.discovery(
    new URL(base),
    client.clientId,
    undefined,
    oidc.ClientSecretBasic(client.clientSecret),
    insecure,
  )

describe('openid-client', () => {
  it('discovers the server, gets a token by client_secret_basic, and a jose-only resource server accepts it', async () => {
    const client = await newClient(['files:read', 'purchase_requests:read'])
    const config = await discoverWithBasic(client)
    const tokens = await oidc.clientCredentialsGrant(config, { scope: 'files:read' })
    expect(tokens).toMatchObject({ token_type: 'bearer', expires_in: 720, scope: 'files:read' })

    const verified = await fetch(resourceUrl, { headers: { authorization: `Bearer ${tokens.access_token}` } })
    expect(verified.status).toBe(200)
    expect(await verified.json()).toMatchObject({
      sub: client.id,
      client_id: client.clientId,
      scope: 'files:read',
    })
    const api = await fetch(`${base}/api/test/scoped`, {
      headers: { authorization: `Bearer ${tokens.access_token}` },
    })
    expect(api.status).toBe(200)
  })

  it('uses RFC 8414 metadata and client_secret_post as well', async () => {
    const client = await newClient(['files:read'])
    const config = await oidc.discovery(
      new URL(base),
      client.clientId,
      undefined,
      oidc.ClientSecretPost(client.clientSecret),
      { ...insecure, algorithm: 'oauth2' },
    )
    const tokens = await oidc.clientCredentialsGrant(config)
    expect(tokens.scope).toBe('files:read')
  })

  it('introspects an active token, and finds it inactive once its client is disabled', async () => {
    const introspector = await newClient(['tokens:introspect'])
    const client = await newClient(['files:read'])
    const clientConfig = await oidc.discovery(
      new URL(base),
      client.clientId,
      client.clientSecret,
      undefined,
      insecure,
    )
    const { access_token } = await oidc.clientCredentialsGrant(clientConfig)
    const config = await discoverWithBasic(introspector)
    expect(await oidc.tokenIntrospection(config, access_token)).toMatchObject({
      active: true,
      sub: client.id,
      client_id: client.clientId,
      scope: 'files:read',
      iss: base,
      token_type: 'Bearer',
    })
    await t.app.services.serviceAccounts.disable(client.clientId)
    expect(await oidc.tokenIntrospection(config, access_token)).toEqual({ active: false })
  })

  it('reports a wrong secret as invalid_client', async () => {
    const client = await newClient(['files:read'])
    const config = await oidc.discovery(
      new URL(base),
      client.clientId,
      undefined,
      oidc.ClientSecretBasic('wrong'),
      insecure,
    )
    const error = await oidc.clientCredentialsGrant(config).then(
      () => null,
      (thrown: unknown) => thrown,
    )
    // A 401 with WWW-Authenticate: openid-client reports the challenge, and the RFC 6749 body.
    expect(error).toBeInstanceOf(oidc.WWWAuthenticateChallengeError)
    const challenge = error as oidc.WWWAuthenticateChallengeError
    expect(challenge.status).toBe(401)
    expect(challenge.cause[0]?.scheme).toBe('basic')
    expect(await challenge.response.json()).toMatchObject({ error: 'invalid_client' })
  })
})

describe('a resource server on jose’s remote JWK set', () => {
  it('refuses a token signed by a key the server does not publish, even under a published kid', async () => {
    const { keys } = (await (await fetch(`${base}/.well-known/jwks.json`)).json()) as {
      keys: { kid: string }[]
    }
    const stranger = await generateKeyPair('ES256')
    const forged = await new SignJWT({ scope: 'files:read', client_id: 'x' })
      .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: keys[0]?.kid as string })
      .setIssuer(base)
      .setAudience('platform-service')
      .setSubject(crypto.randomUUID())
      .setIssuedAt()
      .setExpirationTime('5m')
      .sign(stranger.privateKey)
    expect((await fetch(resourceUrl, { headers: { authorization: `Bearer ${forged}` } })).status).toBe(401)
    expect(
      (await fetch(`${base}/api/test/scoped`, { headers: { authorization: `Bearer ${forged}` } })).status,
    ).toBe(401)
  })
})

describe('a Go client (golang.org/x/oauth2/clientcredentials, go-oidc)', () => {
  let dir = ''
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('discovers the server, gets a token, verifies it with the JWK set and calls the API with it', async () => {
    // `go` on the PATH (CI puts it there), else where the machines carry it.
    const go =
      process.env.GO ??
      (await run('go', ['version']).then(
        () => 'go',
        () => '/usr/local/go/bin/go',
      ))
    const source = path.resolve('test/interop/go')
    dir = await mkdtemp(path.join(tmpdir(), 'oauth2-interop-'))
    const binary = path.join(dir, 'interop')
    // Built from the pinned modules (go.mod, go.sum); the module cache makes later builds quick.
    await run(go, ['build', '-mod=readonly', '-buildvcs=false', '-o', binary, '.'], {
      cwd: source,
      env: { ...process.env, CGO_ENABLED: '0' },
    })
    const client = await newClient(['files:read'])
    const { stdout } = await run(binary, [], {
      env: {
        ...process.env,
        ISSUER: base,
        CLIENT_ID: client.clientId,
        CLIENT_SECRET: client.clientSecret,
        AUDIENCE: 'platform-service',
        API_URL: `${base}/api/test/scoped`,
      },
    })
    const result = JSON.parse(stdout)
    expect(result).toMatchObject({
      subject: client.id,
      claims: { client_id: client.clientId, scope: 'files:read', iss: base },
      apiStatus: 200,
    })
    expect(JSON.parse(result.apiBody)).toMatchObject({ type: 'SERVICE_ACCOUNT', id: client.id })
  }, 300_000)
})
