import { type Static, type TObject, type TSchema, Type } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'

// The whole configuration surface as one TypeBox schema. Each leaf's
// dotted property name is derived from its path: `auth.jwt.accessTokenTtl` is
// `platform.auth.jwt.access-token-ttl`, and its environment variable is
// `PLATFORM_AUTH_JWT_ACCESS_TOKEN_TTL`.

/** Marks how a leaf's text is parsed before validation; durations are held in seconds, sizes in bytes. */
const PARSE = 'x-parse'
type ParseKind = 'duration' | 'size'

const Duration = (defaultText: string, bounds: { minimum?: number; maximum?: number } = {}) =>
  Type.Integer({ minimum: 1, ...bounds, default: parseDuration(defaultText), [PARSE]: 'duration' })
const Size = (defaultText: string) =>
  Type.Integer({ minimum: 1, default: parseSize(defaultText), [PARSE]: 'size' })
const Text = (defaultValue: string) => Type.String({ minLength: 1, default: defaultValue })
const OptionalText = () => Type.Optional(Type.String({ minLength: 1 }))
const List = (defaultValue: string[]) => Type.Array(Type.String({ minLength: 1 }), { default: defaultValue })
const Url = (defaultValue?: string) =>
  defaultValue === undefined
    ? Type.Optional(Type.String({ pattern: '^[a-z][a-z0-9+.-]*://' }))
    : Type.String({ pattern: '^[a-z][a-z0-9+.-]*://', default: defaultValue })
const Count = (defaultValue: number, minimum = 1) => Type.Integer({ minimum, default: defaultValue })

/** `test`: the test suite's profile, like `default` but allowed a cheap password hash. */
export const Profiles = ['development', 'default', 'production', 'test'] as const

/** OWASP's minimum argon2id cost (Password Storage Cheat Sheet): 19 MiB, 2 iterations. */
export const ARGON2_MINIMUM = { memoryKib: 19_456, iterations: 2 } as const

export const ConfigSchema = Type.Object({
  profile: Type.Union(
    Profiles.map((p) => Type.Literal(p)),
    { default: 'default' },
  ),
  dataDir: Text('.data'),
  server: Type.Object({
    host: Text('0.0.0.0'),
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
    trustProxy: Text('false'),
    /**
     * On SIGTERM, how long the instance answers not-ready on /health/ready while still serving,
     * before it stops accepting: long enough for a load balancer's health checks to take it out
     * (their interval times the failures they need, and one more interval). 0: close at once.
     */
    drainDelay: Duration('0s', { minimum: 0, maximum: 300 }),
  }),
  web: Type.Object({
    publicUrl: Url('http://localhost:8080'),
    frontendUrl: Url(),
    cors: Type.Object({ allowedOrigins: List([]) }),
  }),
  auth: Type.Object({
    jwt: Type.Object({
      secret: Type.String({ default: '' }),
      /** Earlier secrets, accepted for verification only, while tokens they signed may still be live. */
      previousSecrets: List([]),
      issuer: Text('platform-core-auth'),
      userAudience: Text('platform-user'),
      serviceAudience: Text('platform-service'),
      accessTokenTtl: Duration('12m'),
      /**
       * How access tokens are signed: `HS256` with the secret above, or `ES256` / `EdDSA` with
       * signing-key, whose public half /.well-known/jwks.json publishes; HS256 tokens are then refused.
       */
      algorithm: Type.Union([Type.Literal('HS256'), Type.Literal('ES256'), Type.Literal('EdDSA')], {
        default: 'HS256',
      }),
      /** The private key of ES256 (P-256) or EdDSA (Ed25519): PEM (PKCS#8) or a JWK. */
      signingKey: OptionalText(),
      /**
       * Earlier signing keys, published and accepted for verification only until the tokens they
       * signed have expired: PEM blocks one after another, or a JSON array of JWKs (or a JWK set).
       */
      previousSigningKeys: OptionalText(),
    }),
    refreshToken: Type.Object({ ttl: Duration('30d') }),
    /**
     * `0s`: strict rotation, a rotated refresh token presented again is reuse. Longer: a rotated
     * token presented again within this time, while its successor is still unused, gets a new
     * successor instead (a lost response, a reload mid-refresh). At most 5 minutes.
     */
    refresh: Type.Object({ reuseGrace: Duration('0s', { minimum: 0, maximum: 300 }) }),
    /**
     * How long an instance trusts a looked-up API key, service account or session state when no
     * revocation notification reaches it (they are pushed to every instance through NOTIFY).
     */
    revocation: Type.Object({ fallbackTtl: Duration('10s') }),
    session: Type.Object({ absoluteTtl: Duration('90d') }),
    /** Each allowance counts one kind of request; windows are fixed (a minute, an hour). */
    rateLimit: Type.Object({
      /** Failed logins per client address; login attempts per account. */
      loginPerMinute: Count(10),
      /** Refreshes per client address. */
      refreshPerMinute: Count(60),
      /** Service-token requests per client address and per client id. */
      serviceTokenPerMinute: Count(10),
      /** Password-reset requests and confirmations per client address. */
      resetPerMinute: Count(10),
      /** Password-reset requests per account email. */
      resetPerHour: Count(5),
      /** Invitations sent per client address. */
      invitePerMinute: Count(10),
      /** Invitations per invited email. */
      invitePerHour: Count(5),
      /** Passkey sign-in options (each stores a challenge) per client address. */
      passkeyOptionsPerMinute: Count(60),
      /** Requests that mail a proof (sign-up, email sign-in, email change) per client address. */
      emailProofPerMinute: Count(10),
      /** The same requests per address mailed: resending is limited. */
      emailProofPerHour: Count(5),
    }),
    cookie: Type.Object({
      accessTokenName: Type.String({ pattern: '^[A-Za-z0-9_-]+$', default: 'access_token' }),
      refreshTokenName: Type.String({ pattern: '^[A-Za-z0-9_-]+$', default: 'refresh_token' }),
      secure: Type.Boolean({ default: true }),
      sameSite: Type.Union([Type.Literal('Strict'), Type.Literal('Lax'), Type.Literal('None')], {
        default: 'Lax',
      }),
    }),
    lockout: Type.Object({ maxAttempts: Count(5), durationMinutes: Count(15) }),
    apiKey: Type.Object({
      headerName: Type.String({ pattern: '^[A-Za-z0-9-]+$', default: 'X-Api-Key' }),
      prefix: Type.String({ pattern: '^[A-Za-z0-9_]+$', default: 'sk_live_' }),
    }),
    otp: Type.Object({ requiredForRoles: List(['admin']), issuer: Text('Platform') }),
    password: Type.Object({
      minLength: Type.Integer({ minimum: 8, maximum: 256, default: 12 }),
      // argon2id cost; the defaults are OWASP's recommendation (19 MiB, 2 iterations, 1 lane).
      hashMemoryKib: Type.Integer({ minimum: 1024, default: 19456 }),
      hashIterations: Type.Integer({ minimum: 1, default: 2 }),
      hashParallelism: Type.Integer({ minimum: 1, maximum: 16, default: 1 }),
    }),
    invitation: Type.Object({ ttl: Duration('7d') }),
    /** Self-service sign-up: a new organization and its first admin, once the address is proved. */
    signUp: Type.Object({ enabled: Type.Boolean({ default: false }) }),
    /** Sign-in with a link or code mailed to the account's address. */
    emailSignIn: Type.Object({ enabled: Type.Boolean({ default: false }) }),
    /** The link and code of sign-up, email sign-in and email change mails. */
    emailProof: Type.Object({ ttl: Duration('15m', { maximum: 86_400 }), maxAttempts: Count(5) }),
    passwordReset: Type.Object({ ttl: Duration('1h') }),
    sessionVersion: Type.Object({ enabled: Type.Boolean({ default: false }) }),
    passkeys: Type.Object({
      /** The relying party's id; default the host of platform.web.public-url. */
      rpId: Type.Optional(Type.String({ pattern: '^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$' })),
      rpName: Text('Platform'),
      /** Origins a ceremony may come from; default public-url's and frontend-url's. */
      origins: List([]),
      /** How long a ceremony's challenge may be answered. */
      challengeTtl: Duration('5m', { maximum: 300 }),
    }),
    // Opt-in: email a user who signs in from a device (User-Agent) the account has not used before.
    newDeviceNotice: Type.Object({ enabled: Type.Boolean({ default: false }) }),
    /**
     * Deployment-wide OpenID Connect providers ("Continue with …"): a JSON array of
     * `{id, issuer, clientId, clientSecret, name?, scopes?, emailVerifiedClaim?}`, parsed and checked
     * at start-up (`oidcProviders`).
     */
    oidc: Type.Object({ providers: Type.String({ default: '[]' }) }),
    /** An organization admin acting as a member: how long one impersonation session may last at most. */
    impersonation: Type.Object({ maxDuration: Duration('1h', { maximum: 86_400 }) }),
  }),
  datasource: Type.Object({
    url: Url(),
    poolSize: Count(10),
    // Named (prepared) statements per connection; false behind a pooler that does not keep them.
    preparedStatements: Type.Boolean({ default: true }),
    /**
     * The LISTEN connection's own URL, straight to PostgreSQL when `url` goes through a transaction
     * pooler (which cannot hold a LISTEN); default `url`.
     */
    listenUrl: Url(),
    migrateOnStart: Type.Boolean({ default: true }),
  }),
  authz: Type.Object({
    openfga: Type.Object({
      apiUrl: Url(),
      storeId: OptionalText(),
      modelId: OptionalText(),
      apiToken: OptionalText(),
    }),
  }),
  storage: Type.Object({
    s3: Type.Object({
      endpoint: Url(),
      publicEndpoint: Url(),
      region: Text('us-east-1'),
      bucket: Text('platform'),
      accessKeyId: OptionalText(),
      secretAccessKey: OptionalText(),
      pathStyle: Type.Boolean({ default: true }),
    }),
    uploadUrlTtl: Duration('15m'),
    downloadUrlTtl: Duration('5m'),
    maxFileSize: Size('100MB'),
  }),
  mail: Type.Object({
    smtp: Type.Object({ url: Url() }),
    from: Text('no-reply@localhost'),
  }),
  audit: Type.Object({
    /** base64, at least 256 bits; unset: derived from the JWT secrets (and rotated with them). */
    chainKey: OptionalText(),
    /** Earlier chain keys, still accepted when verifying the events they hashed. */
    previousKeys: List([]),
  }),
  webhooks: Type.Object({
    /** Allows `http://` URLs and loopback, private, link-local and unique-local targets (development, tests). */
    allowPrivateNetworks: Type.Boolean({ default: false }),
    /** One delivery attempt's limit: connecting, sending and the receiver's answer. */
    timeout: Duration('10s', { maximum: 60 }),
    /** An endpoint is disabled once this many attempts in a row have failed… */
    disableAfterFailures: Count(10),
    /** …and it has had no success for this long (about the retries' span). */
    disableAfter: Duration('72h'),
  }),
  docs: Type.Object({ enabled: Type.Optional(Type.Boolean()) }),
  /** The DNS resolvers domain proofs are looked up with (host:port); empty: the system's. */
  dns: Type.Object({ servers: List([]) }),
  metrics: Type.Object({
    /** When set, GET /metrics needs `Authorization: Bearer <token>`; under production it is required. */
    bearerToken: OptionalText(),
  }),
  retention: Type.Object({
    /** Delivered or set-aside outbox rows (mail and authorization tuples). */
    outbox: Duration('7d'),
    /** Ended sessions (revoked or expired) and their refresh tokens: the audit window. */
    sessions: Duration('90d'),
    /** Used or expired invitation and reset tokens. */
    oneTimeTokens: Duration('7d'),
    /** Files never confirmed (or refused as too large), counted from their upload address's expiry. */
    pendingUploads: Duration('1d'),
    /** Idempotency-Key answers (a retry within 24 h gets the first answer). */
    idempotencyKeys: Duration('24h'),
    /** Audit events; what remains still verifies from its first event. */
    auditEvents: Duration('400d'),
    /** Webhook deliveries (delivered or dead-lettered) and their attempts. */
    webhookDeliveries: Duration('30d'),
  }),
})

type RawConfig = Static<typeof ConfigSchema>

/** The validated configuration; derived defaults (frontend URL, docs switch) are filled in. */
export type Config = Omit<RawConfig, 'auth'> & {
  web: RawConfig['web'] & { frontendUrl: string }
  auth: Omit<RawConfig['auth'], 'oidc'> & {
    passkeys: RawConfig['auth']['passkeys'] & { rpId: string; origins: string[] }
    oidc: { providers: OidcProviderSetting[] }
  }
  docs: { enabled: boolean }
}

/** A dotted property map, e.g. `{ 'platform.auth.jwt.secret': '…' }`. */
export type ConfigSource = Record<string, string | undefined>

export class ConfigError extends Error {
  /** The property at fault, or the environment variable when it names no property. */
  readonly property: string
  constructor(property: string, message: string) {
    const named = property.startsWith(`${PREFIX}.`) ? `${property} (${envName(property)})` : property
    super(`Invalid configuration: ${named} ${message}`)
    this.name = 'ConfigError'
    this.property = property
  }
}

const PREFIX = 'platform'
const MIN_SECRET_BYTES = 32

/** Environment variables accepted besides the derived names. */
const ENV_ALIASES: Record<string, string> = {
  PORT: 'platform.server.port',
  DATABASE_URL: 'platform.datasource.url',
}

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

export function envName(property: string): string {
  return property.toUpperCase().replace(/[.-]/g, '_')
}

interface Leaf {
  property: string
  path: string[]
  schema: TSchema
}

function leaves(schema: TObject, path: string[] = []): Leaf[] {
  return Object.entries(schema.properties).flatMap(([key, child]) => {
    const childPath = [...path, key]
    if (child.type === 'object' && 'properties' in child) return leaves(child as TObject, childPath)
    return [{ property: [PREFIX, ...childPath.map(kebab)].join('.'), path: childPath, schema: child }]
  })
}

const LEAVES = leaves(ConfigSchema)

/** Every configuration property name, for documentation and tests. */
export const configProperties: readonly string[] = LEAVES.map((l) => l.property)

const ENV_PREFIX = `${PREFIX.toUpperCase()}_`
/** Each property's environment variable, to its property. */
const PROPERTY_OF_VARIABLE = new Map(configProperties.map((property) => [envName(property), property]))

/** The candidate closest to `name` by edit distance, if it is close enough to be a likely misspelling. */
function nearest(name: string, candidates: readonly string[], prefix: string): string | undefined {
  const tail = name.slice(prefix.length)
  let best: { candidate: string; distance: number } | undefined
  for (const candidate of candidates) {
    const distance = editDistance(tail, candidate.slice(prefix.length))
    if (!best || distance < best.distance) best = { candidate, distance }
  }
  return best && best.distance <= Math.max(2, Math.floor(tail.length / 3)) ? best.candidate : undefined
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1)
      current[j] = Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, substitution)
    }
    previous = current
  }
  return previous[b.length] as number
}

/**
 * Maps the process environment to dotted property names (derived names win over aliases). A
 * `PLATFORM_*` variable that is no property's name is rejected rather than ignored, so a misspelt
 * variable never leaves its property at the default.
 */
export function configFromEnv(env: NodeJS.ProcessEnv): ConfigSource {
  for (const variable of Object.keys(env)) {
    if (!variable.startsWith(ENV_PREFIX) || PROPERTY_OF_VARIABLE.has(variable)) continue
    const guess = nearest(variable, [...PROPERTY_OF_VARIABLE.keys()], ENV_PREFIX)
    const hint = guess ? ` (did you mean ${guess}, the variable of ${PROPERTY_OF_VARIABLE.get(guess)}?)` : ''
    throw new ConfigError(variable, `names no configuration property${hint}`)
  }
  const source: ConfigSource = {}
  for (const [alias, property] of Object.entries(ENV_ALIASES)) {
    if (env[alias] !== undefined) source[property] = env[alias]
  }
  for (const { property } of LEAVES) {
    const value = env[envName(property)]
    if (value !== undefined) source[property] = value
  }
  return source
}

export function parseDuration(text: string): number {
  const trimmed = text.trim()
  const simple = /^(\d+)\s*(s|m|h|d)?$/i.exec(trimmed)
  if (simple?.[1]) {
    const unit = (simple[2] ?? 's').toLowerCase()
    const factor = { s: 1, m: 60, h: 3600, d: 86400 }[unit] ?? 1
    return Number(simple[1]) * factor
  }
  const iso = /^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$/i.exec(trimmed)
  if (iso && trimmed.length > 1 && !/T$/i.test(trimmed)) {
    const [, d = '0', h = '0', m = '0', s = '0'] = iso
    return Number(d) * 86400 + Number(h) * 3600 + Number(m) * 60 + Number(s)
  }
  throw new Error(`'${text}' is not a duration (examples: 720, 720s, 12m, 30d, PT12M)`)
}

export function parseSize(text: string): number {
  const match = /^(\d+)\s*(B|KB|MB|GB)?$/i.exec(text.trim())
  if (!match?.[1]) throw new Error(`'${text}' is not a size (examples: 1048576, 512KB, 100MB, 1GB)`)
  const unit = (match[2] ?? 'B').toUpperCase()
  const factor = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 }[unit] ?? 1
  return Number(match[1]) * factor
}

function parseLeaf(leaf: Leaf, text: string): unknown {
  const kind = (leaf.schema as { [PARSE]?: ParseKind })[PARSE]
  if (kind === 'duration') return parseDuration(text)
  if (kind === 'size') return parseSize(text)
  switch (leaf.schema.type) {
    case 'integer': {
      if (!/^-?\d+$/.test(text.trim())) throw new Error(`'${text}' is not an integer`)
      return Number(text)
    }
    case 'boolean': {
      const normalized = text.trim().toLowerCase()
      if (normalized === 'true') return true
      if (normalized === 'false') return false
      throw new Error(`'${text}' is not true or false`)
    }
    case 'array':
      return text
        .split(',')
        .map((item) => item.trim())
        .filter((item) => item.length > 0)
    default:
      return text.trim()
  }
}

/** Returns the object holding the leaf at `path`, creating the sections on the way. */
function sectionOf(target: Record<string, unknown>, path: string[]): Record<string, unknown> {
  let node = target
  for (const key of path.slice(0, -1)) {
    node[key] ??= {}
    node = node[key] as Record<string, unknown>
  }
  return node
}

function propertyOfInstancePath(instancePath: string): string {
  const segments = instancePath.split('/').filter(Boolean)
  const leaf = LEAVES.find((l) => l.path.join('/') === segments.slice(0, l.path.length).join('/'))
  return leaf?.property ?? [PREFIX, ...segments.map(kebab)].join('.')
}

export const PREVIOUS_SECRETS = 'platform.auth.jwt.previous-secrets'

/** The deployment's secrets, current first: the current one signs and seals, all of them verify and open. */
/** The audit chain's secrets: the configured chain key and its predecessors, or the JWT secrets. */
export function auditChainSecrets(config: Config): Buffer[] {
  if (config.audit.chainKey === undefined) return jwtSecrets(config)
  return [
    decodeJwtSecret(config.audit.chainKey, 'platform.audit.chain-key'),
    ...config.audit.previousKeys.map((key) => decodeJwtSecret(key, 'platform.audit.previous-keys')),
  ]
}

export function jwtSecrets(config: Config): Buffer[] {
  return [
    decodeJwtSecret(config.auth.jwt.secret),
    ...config.auth.jwt.previousSecrets.map((secret) => decodeJwtSecret(secret, PREVIOUS_SECRETS)),
  ]
}

/** Decodes a base64 JWT secret, or explains why it is not acceptable. */
export function decodeJwtSecret(secret: string, property = 'platform.auth.jwt.secret'): Buffer {
  const text = secret.trim()
  if (text.length === 0) throw new ConfigError(property, 'is required: a base64 value of at least 256 bits')
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || text.length % 4 === 1) {
    throw new ConfigError(property, 'must be base64 encoded')
  }
  const bytes = Buffer.from(text, 'base64')
  if (bytes.length < MIN_SECRET_BYTES) {
    throw new ConfigError(property, `must decode to at least 256 bits (got ${bytes.length * 8})`)
  }
  return bytes
}

/**
 * Builds the validated configuration from dotted properties. Unknown `platform.*` names are
 * rejected, so a misspelt property never silently falls back to its default.
 */
export function loadConfig(source: ConfigSource): Config {
  const known = new Set(configProperties)
  for (const name of Object.keys(source)) {
    if (name.startsWith(`${PREFIX}.`) && !known.has(name)) {
      const guess = nearest(name, configProperties, `${PREFIX}.`)
      throw new ConfigError(name, `is not a known property${guess ? ` (did you mean ${guess}?)` : ''}`)
    }
  }
  const raw: Record<string, unknown> = {}
  for (const leaf of LEAVES) {
    const section = sectionOf(raw, leaf.path)
    const text = source[leaf.property]
    if (text === undefined || (text.trim() === '' && leaf.property !== 'platform.auth.jwt.secret')) continue
    try {
      section[leaf.path[leaf.path.length - 1] as string] = parseLeaf(leaf, text)
    } catch (error) {
      throw new ConfigError(leaf.property, (error as Error).message)
    }
  }
  const withDefaults = Value.Default(ConfigSchema, raw)
  const firstError = Value.Errors(ConfigSchema, withDefaults).First()
  if (firstError) {
    throw new ConfigError(propertyOfInstancePath(firstError.path), firstError.message.toLowerCase())
  }
  const config = withDefaults as RawConfig
  decodeJwtSecret(config.auth.jwt.secret)
  for (const previous of config.auth.jwt.previousSecrets) decodeJwtSecret(previous, PREVIOUS_SECRETS)
  if (config.audit.chainKey !== undefined) decodeJwtSecret(config.audit.chainKey, 'platform.audit.chain-key')
  for (const previous of config.audit.previousKeys) decodeJwtSecret(previous, 'platform.audit.previous-keys')
  const { hashMemoryKib, hashIterations } = config.auth.password
  if (config.profile !== 'test') {
    if (hashMemoryKib < ARGON2_MINIMUM.memoryKib) {
      throw new ConfigError(
        'platform.auth.password.hash-memory-kib',
        `must be at least ${ARGON2_MINIMUM.memoryKib} (OWASP's minimum for argon2id)`,
      )
    }
    if (hashIterations < ARGON2_MINIMUM.iterations) {
      throw new ConfigError(
        'platform.auth.password.hash-iterations',
        `must be at least ${ARGON2_MINIMUM.iterations} (OWASP's minimum for argon2id)`,
      )
    }
  }
  if (config.auth.cookie.sameSite === 'None' && !config.auth.cookie.secure) {
    throw new ConfigError('platform.auth.cookie.same-site', 'None requires platform.auth.cookie.secure=true')
  }
  const frontendUrl = config.web.frontendUrl ?? config.web.publicUrl
  return {
    ...config,
    web: { ...config.web, frontendUrl },
    auth: {
      ...config.auth,
      passkeys: relyingParty(config.auth.passkeys, config.web.publicUrl, frontendUrl),
      oidc: { providers: oidcProviders(config.auth.oidc.providers, config.profile) },
    },
    docs: { enabled: config.docs.enabled ?? config.profile !== 'production' },
  }
}

/**
 * The passkeys' relying party: its id defaults to the public URL's host, its origins to the public
 * and frontend URLs' origins. Every origin's host must be the RP ID or a subdomain of it, as
 * browsers require, or start-up stops naming the property; only when neither the RP ID nor the
 * origins are set is a frontend URL on another domain left out of the defaults instead (passkeys
 * then work from the public URL's pages alone), so a deployment that never uses passkeys needs no
 * passkey configuration.
 */
function relyingParty(
  passkeys: RawConfig['auth']['passkeys'],
  publicUrl: string,
  frontendUrl: string,
): Config['auth']['passkeys'] {
  const origin = (url: string, property: string) => {
    try {
      return new URL(url)
    } catch {
      throw new ConfigError(property, `has an origin that is not a URL: ${url}`)
    }
  }
  const rpId = passkeys.rpId ?? origin(publicUrl, 'platform.web.public-url').hostname
  const fits = (url: URL) => url.hostname === rpId || url.hostname.endsWith(`.${rpId}`)
  let origins: URL[]
  if (passkeys.origins.length > 0) {
    origins = passkeys.origins.map((url) => origin(url, 'platform.auth.passkeys.origins'))
  } else {
    origins = [origin(publicUrl, 'platform.web.public-url'), origin(frontendUrl, 'platform.web.frontend-url')]
    if (passkeys.rpId === undefined) origins = origins.filter(fits)
  }
  for (const each of origins) {
    if (!fits(each)) {
      throw new ConfigError(
        'platform.auth.passkeys.rp-id',
        `must be the host of every passkey origin or a parent domain of it: ${rpId} is not one of ${each.origin}`,
      )
    }
  }
  return { ...passkeys, rpId, origins: [...new Set(origins.map((url) => url.origin))] }
}

// Deployment-wide OpenID Connect providers.

const OIDC_PROVIDERS = 'platform.auth.oidc.providers'

const OidcProviderEntry = Type.Object(
  {
    id: Type.String({ pattern: '^[a-z0-9][a-z0-9-]{0,62}$' }),
    issuer: Type.String({ minLength: 1 }),
    clientId: Type.String({ minLength: 1 }),
    clientSecret: Type.String({ minLength: 1 }),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    scopes: Type.Optional(Type.Array(Type.String({ pattern: '^[\\x21\\x23-\\x5B\\x5D-\\x7E]+$' }))),
    emailVerifiedClaim: Type.Optional(Type.Union([Type.Literal('email_verified'), Type.Literal('xms_edov')])),
  },
  { additionalProperties: false },
)

/** A provider as the service uses it: the presets' name and email-verification claim filled in. */
export interface OidcProviderSetting {
  id: string
  issuer: string
  clientId: string
  clientSecret: string
  name: string
  scopes: string[]
  /** `xms_edov` for Microsoft Entra (its `email` claim is not verified by itself), else `email_verified`. */
  emailVerifiedClaim: 'email_verified' | 'xms_edov'
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])

/**
 * Why an OpenID Connect issuer is not acceptable, or null: issuers are https, except that the
 * development and test profiles accept `http://` on a loopback address (local identity providers).
 */
export function oidcIssuerProblem(issuer: string, profile: Config['profile']): string | null {
  let url: URL
  try {
    url = new URL(issuer)
  } catch {
    return `has an issuer that is not a URL: ${issuer}`
  }
  if (url.search || url.hash) return `has an issuer with a query or fragment: ${issuer}`
  if (url.protocol === 'https:') return null
  const loopbackHttp = profile === 'development' || profile === 'test'
  if (url.protocol === 'http:' && loopbackHttp && LOOPBACK_HOSTS.has(url.hostname)) return null
  return `has an issuer that is not https${loopbackHttp ? ' (nor http on a loopback address)' : ''}: ${issuer}`
}

/**
 * The providers' presets: Google (`https://accounts.google.com`) and Microsoft Entra
 * (`https://login.microsoftonline.com/<tenant>/v2.0`), whose email counts as verified only with
 * the `xms_edov` claim. Everything else defaults to the id as name and `email_verified`.
 */
function oidcPreset(issuer: string): { name?: string; emailVerifiedClaim?: 'xms_edov' } {
  const host = URL.canParse(issuer) ? new URL(issuer).hostname : ''
  if (host === 'accounts.google.com') return { name: 'Google' }
  if (host === 'login.microsoftonline.com') return { name: 'Microsoft', emailVerifiedClaim: 'xms_edov' }
  return {}
}

function oidcProviders(text: string, profile: Config['profile']): OidcProviderSetting[] {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    throw new ConfigError(OIDC_PROVIDERS, 'must be a JSON array of {id, issuer, clientId, clientSecret}')
  }
  if (!Array.isArray(parsed)) {
    throw new ConfigError(OIDC_PROVIDERS, 'must be a JSON array of {id, issuer, clientId, clientSecret}')
  }
  const seen = new Set<string>()
  return parsed.map((entry, index) => {
    const error = Value.Errors(OidcProviderEntry, entry).First()
    if (error) throw new ConfigError(OIDC_PROVIDERS, `[${index}]${error.path} ${error.message.toLowerCase()}`)
    const provider = entry as Static<typeof OidcProviderEntry>
    if (seen.has(provider.id)) throw new ConfigError(OIDC_PROVIDERS, `names the id ${provider.id} twice`)
    seen.add(provider.id)
    const problem = oidcIssuerProblem(provider.issuer, profile)
    if (problem) throw new ConfigError(OIDC_PROVIDERS, `[${index}] ${problem}`)
    const preset = oidcPreset(provider.issuer)
    return {
      id: provider.id,
      issuer: provider.issuer,
      clientId: provider.clientId,
      clientSecret: provider.clientSecret,
      name: provider.name ?? preset.name ?? provider.id,
      scopes: provider.scopes ?? ['openid', 'email', 'profile'],
      emailVerifiedClaim: provider.emailVerifiedClaim ?? preset.emailVerifiedClaim ?? 'email_verified',
    }
  })
}
