import { createHash, randomBytes, randomUUID } from 'node:crypto'
import { createSigner, createVerifier } from 'fast-jwt'
import { LRUCache } from 'lru-cache'
import { type Clock, epochSeconds } from '../clock.ts'
import { type Config, jwtSecrets } from '../config.ts'
import { isUuid } from '../uuid.ts'
import { type PublicJwk, signingKeys } from './signing-keys.ts'

export interface UserTokenClaims {
  sub: string
  sid: string
  org: string
  ver: number
  /** The actor: present when an organization admin holds the session as its user (impersonation). */
  act?: { sub: string }
}

export interface ServiceTokenClaims {
  sub: string
  cid: string
  scope: string
}

export interface IssuedToken {
  token: string
  expiresAt: Date
  expiresInSeconds: number
}

/** Tokens whose `iat` or `nbf` lies further in the future than this are refused. */
export const CLOCK_SKEW_SECONDS = 60

/** The `kid` of a signing key: derived from the key, so it names it without revealing it. */
export function keyId(key: Buffer): string {
  return createHash('sha256').update('platform-core-jwt-kid').update(key).digest('base64url').slice(0, 16)
}

type Verify = (token: string) => Record<string, unknown>

/** The `kid` of a compact JWS header, read without verifying anything (it only picks the key). */
function headerKid(token: string): string | undefined {
  const dot = token.indexOf('.')
  if (dot <= 0 || dot > 512) return undefined
  try {
    const header = JSON.parse(Buffer.from(token.slice(0, dot), 'base64url').toString('utf8')) as {
      kid?: unknown
    }
    return typeof header.kid === 'string' ? header.kid : undefined
  } catch {
    return undefined
  }
}

/**
 * Access tokens, HS256 with the secret or, opt-in (`platform.auth.jwt.algorithm`), ES256 / EdDSA
 * with an asymmetric key whose public half is published (`jwks()`). The algorithm is pinned per
 * key; signature, issuer, audience and expiry are verified; expiry against the injected clock, and
 * so are `iat`/`nbf` (at most 60 s ahead) and the lifetime (`exp - iat` at most the configured TTL).
 * User and service tokens differ by audience, so one can never pass for the other. The current key
 * signs, with its `kid` in the header; previous secrets or keys only verify, so a key is rotated
 * without signing anyone out. In an asymmetric mode no HS256 token verifies. Service tokens are
 * JWT access tokens as RFC 9068 has them: `typ: at+jwt`, `jti`, `client_id`, `scope`.
 */
export class AccessTokens {
  readonly #clock: Clock
  readonly #ttl: number
  readonly #signUser: (payload: Record<string, unknown>) => string
  readonly #signService: (payload: Record<string, unknown>) => string
  readonly #verifyUser: Map<string, Verify>
  readonly #verifyService: Map<string, Verify>
  readonly #issuer: string
  readonly #userAudience: string
  readonly #serviceAudience: string
  readonly #jwks: PublicJwk[]
  readonly #userTokens = new LRUCache<string, Record<string, unknown>>({ max: 10_000 })
  readonly #serviceTokens = new LRUCache<string, Record<string, unknown>>({ max: 10_000 })

  constructor(config: Config, clock: Clock) {
    const { issuer, userAudience, serviceAudience, accessTokenTtl } = config.auth.jwt
    this.#clock = clock
    this.#ttl = accessTokenTtl
    this.#issuer = issuer
    this.#userAudience = userAudience
    this.#serviceAudience = serviceAudience
    const asymmetric = signingKeys(config)
    // Every key that verifies: its kid, algorithm and verification key.
    let keys: { kid: string; algorithm: 'HS256' | 'ES256' | 'EdDSA'; key: string | Buffer }[]
    if (asymmetric) {
      const { current, previous } = asymmetric
      const signer = { key: current.privatePem as string, algorithm: current.algorithm, kid: current.kid }
      this.#signUser = createSigner(signer)
      this.#signService = createSigner({ ...signer, header: { alg: current.algorithm, typ: 'at+jwt' } })
      keys = [current, ...previous].map((k) => ({ kid: k.kid, algorithm: k.algorithm, key: k.publicPem }))
      this.#jwks = [current, ...previous].map((k) => k.jwk)
    } else {
      const secrets = jwtSecrets(config)
      const key = secrets[0] as Buffer
      this.#signUser = createSigner({ key, algorithm: 'HS256', kid: keyId(key) })
      this.#signService = createSigner({
        key,
        algorithm: 'HS256',
        kid: keyId(key),
        header: { alg: 'HS256', typ: 'at+jwt' },
      })
      keys = secrets.map((k) => ({ kid: keyId(k), algorithm: 'HS256', key: k }))
      this.#jwks = []
    }
    // One verifier per key and audience, picked by the token's kid.
    const verifiers = (audience: string, claims: string[]) =>
      new Map(
        keys.map((k) => [
          k.kid,
          createVerifier({
            key: k.key,
            algorithms: [k.algorithm],
            allowedIss: issuer,
            allowedAud: audience,
            // Time claims are checked against the injected clock below, so the cache stays correct.
            ignoreExpiration: true,
            ignoreNotBefore: true,
            requiredClaims: ['iss', 'aud', 'exp', 'iat', ...claims],
          }),
        ]),
      )
    this.#verifyUser = verifiers(userAudience, ['sub', 'sid', 'org', 'ver'])
    this.#verifyService = verifiers(serviceAudience, ['sub', 'cid', 'scope'])
  }

  /** The public keys that verify tokens (a JWK set's `keys`); empty under HS256. */
  jwks(): PublicJwk[] {
    return this.#jwks
  }

  /** The longest lifetime of an access token, in seconds. */
  get ttl(): number {
    return this.#ttl
  }

  #issue(
    sign: (payload: Record<string, unknown>) => string,
    audience: string,
    claims: object,
    notAfter?: Date,
  ): IssuedToken {
    const iat = epochSeconds(this.#clock)
    const cap = notAfter === undefined ? Number.POSITIVE_INFINITY : Math.floor(notAfter.getTime() / 1000)
    const exp = Math.max(iat + 1, Math.min(iat + this.#ttl, cap))
    // iat and exp come from the injected clock (fast-jwt honours an explicit iat).
    const token = sign({ ...claims, iss: this.#issuer, aud: audience, iat, exp })
    return { token, expiresAt: new Date(exp * 1000), expiresInSeconds: exp - iat }
  }

  /** A user token; it expires at `notAfter` when that comes before the configured lifetime ends. */
  issueUserToken(claims: UserTokenClaims, notAfter?: Date): IssuedToken {
    return this.#issue(this.#signUser, this.#userAudience, claims, notAfter)
  }

  /** `cid` stays beside RFC 9068's `client_id` for the verifiers of tokens issued before it. */
  issueServiceToken(claims: ServiceTokenClaims): IssuedToken {
    return this.#issue(this.#signService, this.#serviceAudience, {
      ...claims,
      client_id: claims.cid,
      jti: randomUUID(),
    })
  }

  /** The verified claims of a valid token of either audience (introspection), or null. */
  inspect(
    token: string,
  ):
    | { kind: 'user'; claims: UserTokenClaims; payload: Record<string, unknown> }
    | { kind: 'service'; claims: ServiceTokenClaims; payload: Record<string, unknown> }
    | null {
    const service = this.verifyServiceToken(token)
    if (service) return { kind: 'service', claims: service, payload: this.#serviceTokens.get(token) ?? {} }
    const user = this.verifyUserToken(token)
    if (user) return { kind: 'user', claims: user, payload: this.#userTokens.get(token) ?? {} }
    return null
  }

  /**
   * The payload of a token whose signature, issuer, audience and claims were verified; the time
   * claims are checked on every call against the clock. Verified tokens are remembered (10,000 per
   * audience, least recently used out) under the token itself, so a token's header is read and its
   * signature checked once: fast-jwt's own cache keys by a SHA-256 of the token, computed on every
   * request, and warns against any other key.
   */
  #verified(
    verifiers: Map<string, Verify>,
    cache: LRUCache<string, Record<string, unknown>>,
    token: string,
  ): Record<string, unknown> | null {
    let payload = cache.get(token)
    if (payload === undefined) {
      const kid = headerKid(token)
      const verify = kid === undefined ? undefined : verifiers.get(kid)
      if (!verify) return null
      try {
        payload = verify(token)
      } catch {
        return null
      }
      cache.set(token, payload)
    }
    const now = epochSeconds(this.#clock)
    const { exp, iat, nbf } = payload
    if (typeof exp !== 'number' || exp <= now) return null
    if (typeof iat !== 'number' || iat > now + CLOCK_SKEW_SECONDS || exp - iat > this.#ttl) return null
    if (nbf !== undefined && (typeof nbf !== 'number' || nbf > now + CLOCK_SKEW_SECONDS)) return null
    return payload
  }

  /** The claims of a valid user token, or null for anything else (never throws). */
  verifyUserToken(token: string): UserTokenClaims | null {
    const p = this.#verified(this.#verifyUser, this.#userTokens, token)
    if (!p) return null
    const { sub, sid, org, ver } = p
    if (typeof sub !== 'string' || !isUuid(sub)) return null
    if (typeof sid !== 'string' || !isUuid(sid)) return null
    if (typeof org !== 'string' || !isUuid(org)) return null
    if (typeof ver !== 'number' || !Number.isInteger(ver)) return null
    if (p.act === undefined) return { sub, sid, org, ver }
    const act = p.act as { sub?: unknown } | null
    if (typeof act !== 'object' || act === null || typeof act.sub !== 'string' || !isUuid(act.sub))
      return null
    return { sub, sid, org, ver, act: { sub: act.sub } }
  }

  verifyServiceToken(token: string): ServiceTokenClaims | null {
    const p = this.#verified(this.#verifyService, this.#serviceTokens, token)
    if (!p) return null
    const { sub, cid, scope } = p
    if (typeof sub !== 'string' || !isUuid(sub) || typeof cid !== 'string' || typeof scope !== 'string')
      return null
    return { sub, cid, scope }
  }
}

/** An opaque random token (256 bits, URL-safe) and the SHA-256 under which it is stored. */
export function newOpaqueToken(): { raw: string; hash: string } {
  const raw = randomBytes(32).toString('base64url')
  return { raw, hash: sha256(raw) }
}

export function sha256(value: string): string {
  return createHash('sha256').update(value).digest('hex')
}
