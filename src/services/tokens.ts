import { createHash, randomBytes } from 'node:crypto'
import { createSigner, createVerifier } from 'fast-jwt'
import { type Clock, epochSeconds } from '../clock.ts'
import { type Config, decodeJwtSecret } from '../config.ts'

export interface UserTokenClaims {
  sub: string
  sid: string
  org: string
  ver: number
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

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/**
 * HS256 access tokens. The algorithm is pinned; signature, issuer, audience and expiry are
 * verified; expiry against the injected clock. User and service tokens differ by audience, so one
 * can never pass for the other.
 */
export class AccessTokens {
  readonly #clock: Clock
  readonly #ttl: number
  readonly #sign: (payload: Record<string, unknown>) => string
  readonly #verifyUser: (token: string) => Record<string, unknown>
  readonly #verifyService: (token: string) => Record<string, unknown>
  readonly #issuer: string
  readonly #userAudience: string
  readonly #serviceAudience: string

  constructor(config: Config, clock: Clock) {
    const key = decodeJwtSecret(config.auth.jwt.secret)
    const { issuer, userAudience, serviceAudience, accessTokenTtl } = config.auth.jwt
    this.#clock = clock
    this.#ttl = accessTokenTtl
    this.#issuer = issuer
    this.#userAudience = userAudience
    this.#serviceAudience = serviceAudience
    this.#sign = createSigner({ key, algorithm: 'HS256' })
    const verifier = (audience: string, claims: string[]) =>
      createVerifier({
        key,
        algorithms: ['HS256'],
        allowedIss: issuer,
        allowedAud: audience,
        // Expiry is checked against the injected clock below, so the cache stays correct.
        ignoreExpiration: true,
        ignoreNotBefore: true,
        requiredClaims: ['iss', 'aud', 'exp', 'iat', ...claims],
        cache: 10_000,
      })
    this.#verifyUser = verifier(userAudience, ['sub', 'sid', 'org', 'ver'])
    this.#verifyService = verifier(serviceAudience, ['sub', 'cid', 'scope'])
  }

  #issue(audience: string, claims: object): IssuedToken {
    const iat = epochSeconds(this.#clock)
    const exp = iat + this.#ttl
    // iat and exp come from the injected clock (fast-jwt honours an explicit iat).
    const token = this.#sign({ ...claims, iss: this.#issuer, aud: audience, iat, exp })
    return { token, expiresAt: new Date(exp * 1000), expiresInSeconds: this.#ttl }
  }

  issueUserToken(claims: UserTokenClaims): IssuedToken {
    return this.#issue(this.#userAudience, claims)
  }

  issueServiceToken(claims: ServiceTokenClaims): IssuedToken {
    return this.#issue(this.#serviceAudience, claims)
  }

  #verified(
    verify: (token: string) => Record<string, unknown>,
    token: string,
  ): Record<string, unknown> | null {
    let payload: Record<string, unknown>
    try {
      payload = verify(token)
    } catch {
      return null
    }
    if (typeof payload.exp !== 'number' || payload.exp <= epochSeconds(this.#clock)) return null
    return payload
  }

  /** The claims of a valid user token, or null for anything else (never throws). */
  verifyUserToken(token: string): UserTokenClaims | null {
    const p = this.#verified(this.#verifyUser, token)
    if (!p) return null
    const { sub, sid, org, ver } = p
    if (typeof sub !== 'string' || !UUID.test(sub)) return null
    if (typeof sid !== 'string' || !UUID.test(sid)) return null
    if (typeof org !== 'string' || !UUID.test(org)) return null
    if (typeof ver !== 'number' || !Number.isInteger(ver)) return null
    return { sub, sid, org, ver }
  }

  verifyServiceToken(token: string): ServiceTokenClaims | null {
    const p = this.#verified(this.#verifyService, token)
    if (!p) return null
    const { sub, cid, scope } = p
    if (typeof sub !== 'string' || !UUID.test(sub) || typeof cid !== 'string' || typeof scope !== 'string')
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
