import { randomUUID } from 'node:crypto'
import { exportJWK, exportPKCS8, exportSPKI, generateKeyPair } from 'jose'
import { describe, expect, it } from 'vitest'
import { AccessTokens } from '../src/security/tokens.ts'
import { configErrorOf, testConfig, useTestApp, useTestAppBeside } from './helpers/app.ts'
import { TestClock } from './helpers/clock.ts'
import { protectedTestRoutes } from './helpers/machines.ts'

// Asymmetric signing keys: configuration in PEM or JWK, rotation (a previous key still verifies, a
// removed one does not, across algorithms too), the JWK set, HS256 refused in an asymmetric mode,
// and two instances with the same key configuration accepting each other's tokens.

const es256 = await generateKeyPair('ES256', { extractable: true })
const ed25519 = await generateKeyPair('EdDSA', { extractable: true })
const es256Pem = await exportPKCS8(es256.privateKey)
const ed25519Jwk = JSON.stringify(await exportJWK(ed25519.privateKey))

const userClaims = () => ({ sub: randomUUID(), sid: randomUUID(), org: randomUUID(), ver: 0 })
const serviceClaims = () => ({ sub: randomUUID(), cid: 'backend', scope: 'files:read' })
const header = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString('utf8'))

describe('signing keys', () => {
  const clock = new TestClock()
  const secret = testConfig().auth.jwt.secret
  const tokensWith = (overrides: Record<string, string>) =>
    new AccessTokens(testConfig({ 'platform.auth.jwt.secret': secret, ...overrides }), clock)

  it('keeps tokens of a previous key valid after rotation and refuses them once the key is removed', async () => {
    const before = tokensWith({
      'platform.auth.jwt.algorithm': 'ES256',
      'platform.auth.jwt.signing-key': es256Pem,
    })
    const user = before.issueUserToken(userClaims()).token
    const service = before.issueServiceToken(serviceClaims()).token
    // Rotated to an Ed25519 key (given as a JWK); the old one stays, by its public half only.
    const rotated = tokensWith({
      'platform.auth.jwt.algorithm': 'EdDSA',
      'platform.auth.jwt.signing-key': ed25519Jwk,
      'platform.auth.jwt.previous-signing-keys': await exportSPKI(es256.publicKey),
    })
    expect(rotated.verifyUserToken(user)).not.toBeNull()
    expect(rotated.verifyServiceToken(service)).not.toBeNull()
    const fresh = rotated.issueServiceToken(serviceClaims()).token
    expect(header(fresh)).toMatchObject({ alg: 'EdDSA', typ: 'at+jwt' })
    expect(rotated.jwks().map((key) => key.kid)).toEqual([header(fresh).kid, header(service).kid])
    expect(rotated.jwks().map((key) => key.alg)).toEqual(['EdDSA', 'ES256'])
    // The old key removed: its tokens no longer verify, the new key's still do.
    const removed = tokensWith({
      'platform.auth.jwt.algorithm': 'EdDSA',
      'platform.auth.jwt.signing-key': ed25519Jwk,
    })
    expect(removed.verifyUserToken(user)).toBeNull()
    expect(removed.verifyServiceToken(service)).toBeNull()
    expect(removed.verifyServiceToken(fresh)).not.toBeNull()
    expect(removed.jwks()).toHaveLength(1)
  })

  it('accepts previous keys as a JSON array of JWKs, and never publishes a private member', async () => {
    const tokens = tokensWith({
      'platform.auth.jwt.algorithm': 'ES256',
      'platform.auth.jwt.signing-key': JSON.stringify(await exportJWK(es256.privateKey)),
      'platform.auth.jwt.previous-signing-keys': JSON.stringify([await exportJWK(ed25519.privateKey)]),
    })
    const published = JSON.stringify(tokens.jwks())
    expect(tokens.jwks()).toHaveLength(2)
    for (const member of ['"d"', '"p"', '"q"', 'PRIVATE']) expect(published).not.toContain(member)
  })

  it('refuses HS256 tokens in an asymmetric mode, and an asymmetric token under HS256', () => {
    const hs = tokensWith({})
    const es = tokensWith({
      'platform.auth.jwt.algorithm': 'ES256',
      'platform.auth.jwt.signing-key': es256Pem,
    })
    const hsToken = hs.issueUserToken(userClaims()).token
    expect(hs.verifyUserToken(hsToken)).not.toBeNull()
    expect(es.verifyUserToken(hsToken)).toBeNull()
    expect(es.verifyServiceToken(hs.issueServiceToken(serviceClaims()).token)).toBeNull()
    expect(hs.verifyUserToken(es.issueUserToken(userClaims()).token)).toBeNull()
    expect(hs.jwks()).toEqual([])
  })

  it('names the property at start-up for a missing, malformed, public-only or mismatched key', async () => {
    const cases: [Record<string, string>, string, RegExp][] = [
      [{ 'platform.auth.jwt.algorithm': 'ES256' }, 'platform.auth.jwt.signing-key', /is required/],
      [
        { 'platform.auth.jwt.algorithm': 'ES256', 'platform.auth.jwt.signing-key': 'not a key' },
        'platform.auth.jwt.signing-key',
        /PEM or JWK/,
      ],
      [
        {
          'platform.auth.jwt.algorithm': 'ES256',
          'platform.auth.jwt.signing-key': await exportSPKI(es256.publicKey),
        },
        'platform.auth.jwt.signing-key',
        /private key/,
      ],
      [
        { 'platform.auth.jwt.algorithm': 'ES256', 'platform.auth.jwt.signing-key': ed25519Jwk },
        'platform.auth.jwt.signing-key',
        /EdDSA key, not one for ES256/,
      ],
      [
        {
          'platform.auth.jwt.algorithm': 'ES256',
          'platform.auth.jwt.signing-key': es256Pem,
          'platform.auth.jwt.previous-signing-keys': '[{"kty":"EC"}]',
        },
        'platform.auth.jwt.previous-signing-keys',
        /PEM or JWK/,
      ],
      [{ 'platform.auth.jwt.algorithm': 'RS256' }, 'platform.auth.jwt.algorithm', /./],
    ]
    for (const [overrides, property, message] of cases) {
      // The schema refuses an unknown algorithm when loading; the keys are read when the tokens are built.
      const error = configErrorOf(() => new AccessTokens(testConfig(overrides), clock))
      expect(error.property).toBe(property)
      expect(error.message).toMatch(message)
    }
  })
})

describe('two instances with the same key configuration', () => {
  const keyConfig = {
    'platform.auth.jwt.algorithm': 'EdDSA',
    'platform.auth.jwt.signing-key': ed25519Jwk,
    'platform.auth.rate-limit.service-token-per-minute': '100',
  }
  const a = useTestApp({ config: keyConfig, configure: protectedTestRoutes() })
  const b = useTestAppBeside(a, { config: keyConfig, configure: protectedTestRoutes() })

  it('issue tokens each other verifies', async () => {
    const client = await a.app.services.serviceAccounts.create({
      clientId: `svc-${randomUUID()}`,
      description: 'a backend',
      scopes: ['files:read'],
    })
    const form = `grant_type=client_credentials&client_id=${client.clientId}&client_secret=${client.clientSecret}`
    for (const [issuer, verifier] of [
      [a, b],
      [b, a],
    ] as const) {
      const res = await issuer.app.inject({
        method: 'POST',
        url: '/oauth2/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: form,
      })
      expect(res.statusCode).toBe(200)
      const api = await verifier.app.inject({
        method: 'GET',
        url: '/api/test/scoped',
        headers: { authorization: `Bearer ${res.json().access_token}` },
      })
      expect(api.statusCode).toBe(200)
      expect(api.json()).toMatchObject({ type: 'SERVICE_ACCOUNT', id: client.id })
    }
    const [jwksA, jwksB] = await Promise.all([a, b].map((t) => t.app.inject('/.well-known/jwks.json')))
    expect(jwksA?.json()).toEqual(jwksB?.json())
  })

  it('answer discovery with 404 naming platform.auth.jwt.issuer while the issuer is no URL', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const res = await a.app.inject(path)
      expect(res.statusCode).toBe(404)
      expect(res.json()).toEqual({
        error: 'not_found',
        error_description: expect.stringContaining('platform.auth.jwt.issuer'),
      })
    }
  })
})
