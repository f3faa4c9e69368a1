import { createHash, createPrivateKey, createPublicKey, type JsonWebKey, type KeyObject } from 'node:crypto'
import { type Config, ConfigError } from '../config.ts'

// Asymmetric signing keys of access tokens (ES256 on P-256, EdDSA on Ed25519): parsed from PEM or
// JWK with node:crypto, named by their RFC 7638 thumbprint (the `kid` of every token they sign),
// and published as public JWKs only. A key refused stops start-up naming its property (a
// ConfigError from `signingKeys`, when the access tokens are built).

export type AsymmetricAlgorithm = 'ES256' | 'EdDSA'

export interface SigningKey {
  kid: string
  algorithm: AsymmetricAlgorithm
  /** PKCS#8 PEM of the private key; absent for a previous key given by its public half only. */
  privatePem?: string
  publicPem: string
  /** The public JWK as /.well-known/jwks.json lists it: `kty`, `crv`, `x` (`y`), `kid`, `alg`, `use`. */
  jwk: PublicJwk
}

export interface PublicJwk {
  kty: string
  crv: string
  x: string
  y?: string
  kid: string
  alg: AsymmetricAlgorithm
  use: 'sig'
}

/** The algorithm a key signs with, from its type and curve; any other key is refused. */
function algorithmOf(key: KeyObject): AsymmetricAlgorithm {
  if (key.asymmetricKeyType === 'ed25519') return 'EdDSA'
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') return 'ES256'
  throw new Error('must be a P-256 (ES256) or Ed25519 (EdDSA) key')
}

/** RFC 7638: SHA-256 over the required public members in lexicographic order. */
function thumbprint(jwk: JsonWebKey): string {
  const members =
    jwk.kty === 'EC'
      ? { crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y }
      : { crv: jwk.crv, kty: jwk.kty, x: jwk.x }
  return createHash('sha256').update(JSON.stringify(members)).digest('base64url')
}

/** One key from PEM (PKCS#8 or SEC1 private, SPKI public) or a JWK (private or public). */
export function parseSigningKey(text: string): SigningKey {
  const trimmed = text.trim()
  let key: KeyObject
  try {
    if (trimmed.startsWith('{')) {
      const jwk = JSON.parse(trimmed) as JsonWebKey
      key =
        'd' in jwk
          ? createPrivateKey({ key: jwk, format: 'jwk' })
          : createPublicKey({ key: jwk, format: 'jwk' })
    } else {
      // PEM from an environment variable may carry literal `\n` for its line breaks.
      const pem = trimmed.replaceAll('\\n', '\n')
      key = pem.includes('PRIVATE KEY') ? createPrivateKey(pem) : createPublicKey(pem)
    }
  } catch {
    throw new Error('is not a PEM or JWK key')
  }
  const algorithm = algorithmOf(key)
  const publicKey = key.type === 'private' ? createPublicKey(key) : key
  const exported = publicKey.export({ format: 'jwk' })
  const kid = thumbprint(exported)
  const jwk: PublicJwk = {
    kty: exported.kty as string,
    crv: exported.crv as string,
    x: exported.x as string,
    ...(exported.y ? { y: exported.y } : {}),
    kid,
    alg: algorithm,
    use: 'sig',
  }
  return {
    kid,
    algorithm,
    ...(key.type === 'private' ? { privatePem: key.export({ format: 'pem', type: 'pkcs8' }) as string } : {}),
    publicPem: publicKey.export({ format: 'pem', type: 'spki' }) as string,
    jwk,
  }
}

/** Several keys: PEM blocks one after another, a JSON array of JWKs, or a JWK set (`{keys: […]}`). */
export function parseSigningKeys(text: string): SigningKey[] {
  const trimmed = text.trim().replaceAll('\\n', '\n')
  if (trimmed.startsWith('[') || trimmed.startsWith('{')) {
    let parsed: unknown
    try {
      parsed = JSON.parse(trimmed)
    } catch {
      throw new Error('is not a JSON array of JWKs or a JWK set')
    }
    const list = Array.isArray(parsed) ? parsed : (parsed as { keys?: unknown }).keys
    if (!Array.isArray(list)) throw new Error('is not a JSON array of JWKs or a JWK set')
    return list.map((jwk) => parseSigningKey(JSON.stringify(jwk)))
  }
  const blocks = trimmed.match(/-----BEGIN [A-Z ]+-----[\s\S]+?-----END [A-Z ]+-----/g)
  if (!blocks) throw new Error('holds no PEM block')
  return blocks.map(parseSigningKey)
}

export const SIGNING_KEY = 'platform.auth.jwt.signing-key'
export const PREVIOUS_SIGNING_KEYS = 'platform.auth.jwt.previous-signing-keys'

/**
 * The asymmetric signing keys, current first, or null under HS256. The current key must be a private
 * key of the configured algorithm; previous keys (private or public) only verify.
 */
export function signingKeys(
  config: Pick<Config, 'auth'>,
): { current: SigningKey; previous: SigningKey[] } | null {
  const { algorithm, signingKey, previousSigningKeys } = config.auth.jwt
  if (algorithm === 'HS256') return null
  if (signingKey === undefined) {
    throw new ConfigError(SIGNING_KEY, `is required when platform.auth.jwt.algorithm is ${algorithm}`)
  }
  const parsed = (property: string, parse: () => SigningKey[]) => {
    try {
      return parse()
    } catch (error) {
      throw new ConfigError(property, (error as Error).message)
    }
  }
  const [current] = parsed(SIGNING_KEY, () => [parseSigningKey(signingKey)]) as [SigningKey]
  if (current.privatePem === undefined) throw new ConfigError(SIGNING_KEY, 'must be a private key')
  if (current.algorithm !== algorithm) {
    throw new ConfigError(SIGNING_KEY, `is a ${current.algorithm} key, not one for ${algorithm}`)
  }
  const previous =
    previousSigningKeys === undefined
      ? []
      : parsed(PREVIOUS_SIGNING_KEYS, () => parseSigningKeys(previousSigningKeys))
  return { current, previous: previous.filter((key) => key.kid !== current.kid) }
}
