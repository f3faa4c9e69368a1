import { describe, expect, it } from 'vitest'
import {
  configFromEnv,
  configProperties,
  envName,
  loadConfig,
  parseDuration,
  parseSize,
} from '../src/config.ts'
import { configErrorOf, testSecret } from './helpers/app.ts'

const secret = testSecret()
const load = (source: Record<string, string> = {}) =>
  loadConfig({ 'platform.auth.jwt.secret': secret, ...source })

describe('configuration', () => {
  it('applies the documented defaults', () => {
    const config = load()
    expect(config.profile).toBe('default')
    expect(config.server).toEqual({ host: '0.0.0.0', port: 8080, trustProxy: 'false', drainDelay: 0 })
    expect(config.web.publicUrl).toBe('http://localhost:8080')
    expect(config.web.frontendUrl).toBe('http://localhost:8080')
    expect(config.web.cors.allowedOrigins).toEqual([])
    expect(config.auth.jwt).toMatchObject({
      issuer: 'platform-core-auth',
      userAudience: 'platform-user',
      serviceAudience: 'platform-service',
      accessTokenTtl: 720,
    })
    expect(config.auth.refreshToken.ttl).toBe(30 * 86400)
    expect(config.auth.session.absoluteTtl).toBe(90 * 86400)
    expect(config.auth.rateLimit).toEqual({
      loginPerMinute: 10,
      refreshPerMinute: 60,
      serviceTokenPerMinute: 10,
      resetPerMinute: 10,
      resetPerHour: 5,
      invitePerMinute: 10,
      invitePerHour: 5,
      passkeyOptionsPerMinute: 60,
      emailProofPerMinute: 10,
      emailProofPerHour: 5,
    })
    expect(config.auth.signUp.enabled).toBe(false)
    expect(config.auth.emailSignIn.enabled).toBe(false)
    expect(config.auth.emailProof).toEqual({ ttl: 15 * 60, maxAttempts: 5 })
    expect(config.auth.refresh.reuseGrace).toBe(0)
    expect(config.auth.revocation.fallbackTtl).toBe(10)
    expect(config.retention.auditEvents).toBe(400 * 86400)
    expect(config.audit).toEqual({ previousKeys: [] })
    expect(config.auth.passkeys).toEqual({
      rpId: 'localhost',
      rpName: 'Platform',
      origins: ['http://localhost:8080'],
      challengeTtl: 300,
    })
    expect(config.auth.cookie).toEqual({
      accessTokenName: 'access_token',
      refreshTokenName: 'refresh_token',
      secure: true,
      sameSite: 'Lax',
    })
    expect(config.auth.lockout).toEqual({ maxAttempts: 5, durationMinutes: 15 })
    expect(config.auth.apiKey).toEqual({ headerName: 'X-Api-Key', prefix: 'sk_live_' })
    expect(config.auth.otp).toEqual({ requiredForRoles: ['admin'], issuer: 'Platform' })
    expect(config.auth.password).toEqual({
      minLength: 12,
      hashMemoryKib: 19456,
      hashIterations: 2,
      hashParallelism: 1,
    })
    expect(config.auth.invitation.ttl).toBe(7 * 86400)
    expect(config.auth.passwordReset.ttl).toBe(3600)
    expect(config.auth.sessionVersion.enabled).toBe(false)
    expect(config.datasource).toEqual({ poolSize: 10, preparedStatements: true, migrateOnStart: true })
    expect(config.storage.uploadUrlTtl).toBe(900)
    expect(config.storage.downloadUrlTtl).toBe(300)
    expect(config.storage.maxFileSize).toBe(100 * 1024 * 1024)
    expect(config.mail.from).toBe('no-reply@localhost')
    expect(config.docs.enabled).toBe(true)
  })

  it('derives the passkeys’ relying party from the URLs and refuses an RP ID that does not cover every origin', () => {
    const base = { 'platform.auth.jwt.secret': secret }
    const sameSite = loadConfig({
      ...base,
      'platform.web.public-url': 'https://api.example.com',
      'platform.web.frontend-url': 'https://app.example.com/console',
      'platform.auth.passkeys.rp-id': 'example.com',
    })
    expect(sameSite.auth.passkeys.rpId).toBe('example.com')
    expect(sameSite.auth.passkeys.origins).toEqual(['https://api.example.com', 'https://app.example.com'])
    // Neither set: a frontend on another domain is left out, so start-up does not depend on passkeys.
    const elsewhere = loadConfig({
      ...base,
      'platform.web.public-url': 'https://api.example.com',
      'platform.web.frontend-url': 'https://app.other.test',
    })
    expect(elsewhere.auth.passkeys).toMatchObject({
      rpId: 'api.example.com',
      origins: ['https://api.example.com'],
    })
    for (const wrong of [
      { 'platform.web.public-url': 'https://api.example.com', 'platform.auth.passkeys.rp-id': 'example.org' },
      { 'platform.web.public-url': 'https://api.example.com', 'platform.auth.passkeys.rp-id': 'ample.com' },
      {
        'platform.web.public-url': 'https://api.example.com',
        'platform.auth.passkeys.origins': 'https://app.example.com,https://evil.test',
      },
    ]) {
      expect(() => loadConfig({ ...base, ...wrong })).toThrow(/platform\.auth\.passkeys\.rp-id/)
    }
    expect(() => loadConfig({ ...base, 'platform.auth.passkeys.rp-id': 'https://example.com' })).toThrow(
      /platform\.auth\.passkeys\.rp-id/,
    )
    expect(() => loadConfig({ ...base, 'platform.auth.passkeys.challenge-ttl': '10m' })).toThrow(
      /platform\.auth\.passkeys\.challenge-ttl/,
    )
  })

  it('refuses an audit chain key that is not base64 of at least 256 bits, naming the property', () => {
    expect(() => load({ 'platform.audit.chain-key': 'c2hvcnQ=' })).toThrow(/platform\.audit\.chain-key/)
    expect(() => load({ 'platform.audit.previous-keys': 'not base64!' })).toThrow(
      /platform\.audit\.previous-keys/,
    )
    expect(load({ 'platform.audit.chain-key': secret }).audit.chainKey).toBe(secret)
  })

  it('derives environment names by upper-casing and replacing dots and dashes', () => {
    expect(envName('platform.auth.jwt.access-token-ttl')).toBe('PLATFORM_AUTH_JWT_ACCESS_TOKEN_TTL')
    expect(configProperties).toContain('platform.storage.s3.secret-access-key')
    expect(configProperties).toContain('platform.auth.rate-limit.login-per-minute')
    const source = configFromEnv({
      PLATFORM_AUTH_JWT_ACCESS_TOKEN_TTL: '5m',
      PLATFORM_WEB_CORS_ALLOWED_ORIGINS: 'https://a.example, https://b.example',
      PORT: '9090',
      DATABASE_URL: 'postgres://db/app',
      UNRELATED: 'x',
    })
    expect(source).toEqual({
      'platform.auth.jwt.access-token-ttl': '5m',
      'platform.web.cors.allowed-origins': 'https://a.example, https://b.example',
      'platform.server.port': '9090',
      'platform.datasource.url': 'postgres://db/app',
    })
    const config = load(source as Record<string, string>)
    expect(config.auth.jwt.accessTokenTtl).toBe(300)
    expect(config.web.cors.allowedOrigins).toEqual(['https://a.example', 'https://b.example'])
    expect(config.server.port).toBe(9090)
  })

  it('stops on a misspelt PLATFORM_ variable, naming it and the variable it resembles', () => {
    const error = configErrorOf(() =>
      configFromEnv({ PLATFORM_SERVER_PORT: '9090', PLATFORM_AUTH_JWT_SECRETT: secret, PATH: '/usr/bin' }),
    )
    expect(error.property).toBe('PLATFORM_AUTH_JWT_SECRETT')
    expect(error.message).toBe(
      'Invalid configuration: PLATFORM_AUTH_JWT_SECRETT names no configuration property (did you mean PLATFORM_AUTH_JWT_SECRET, the variable of platform.auth.jwt.secret?)',
    )
  })

  it('stops on a PLATFORM_ variable resembling no property, and on one set to nothing', () => {
    expect(configErrorOf(() => configFromEnv({ PLATFORM_FLAVOUR: 'vanilla' })).message).toBe(
      'Invalid configuration: PLATFORM_FLAVOUR names no configuration property',
    )
    expect(configErrorOf(() => configFromEnv({ PLATFORM_DATASOURCE_URI: '' })).message).toContain(
      'did you mean PLATFORM_DATASOURCE_URL',
    )
  })

  it('reads every property from its own variable, and leaves other variables alone', () => {
    const env = Object.fromEntries(configProperties.map((property) => [envName(property), 'x']))
    expect(
      Object.keys(configFromEnv({ ...env, PLATFORM: 'x', NOT_PLATFORM_X: 'x', platform_x: 'x' })),
    ).toEqual(configProperties)
    expect(loadConfig(configFromEnv({ PLATFORM_AUTH_JWT_SECRET: secret })).auth.jwt.secret).toBe(secret)
  })

  it('names a property a misspelt platform property resembles', () => {
    const error = configErrorOf(() => load({ 'platform.server.prot': '1' }))
    expect(error.message).toBe(
      'Invalid configuration: platform.server.prot (PLATFORM_SERVER_PROT) is not a known property (did you mean platform.server.port?)',
    )
  })

  it('lets the derived name win over an alias', () => {
    expect(configFromEnv({ PORT: '1', PLATFORM_SERVER_PORT: '2' })['platform.server.port']).toBe('2')
  })

  it.each([
    ['720', 720],
    ['720s', 720],
    ['12m', 720],
    ['2h', 7200],
    ['30d', 2_592_000],
    ['PT12M', 720],
    ['P1DT1H', 90_000],
    ['pt30s', 30],
  ])('parses the duration %s', (text, seconds) => {
    expect(parseDuration(text)).toBe(seconds)
  })

  it.each(['', '12x', 'P', 'PT', '-5', '1.5m'])('rejects the duration %j', (text) => {
    expect(() => parseDuration(text)).toThrow(/not a duration/)
  })

  it('parses sizes in binary units', () => {
    expect(parseSize('100MB')).toBe(104_857_600)
    expect(parseSize('512 KB')).toBe(524_288)
    expect(parseSize('1024')).toBe(1024)
    expect(() => parseSize('ten')).toThrow(/not a size/)
  })

  it.each([
    ['platform.auth.jwt.access-token-ttl', 'soon'],
    ['platform.server.port', '99999'],
    ['platform.server.port', 'eighty'],
    ['platform.auth.cookie.secure', 'yes'],
    ['platform.auth.cookie.same-site', 'Sometimes'],
    ['platform.profile', 'staging'],
    ['platform.datasource.url', 'not a url'],
    ['platform.auth.lockout.max-attempts', '0'],
    ['platform.auth.password.min-length', '300'],
  ])('stops on an invalid %s naming the property', (property, value) => {
    const error = configErrorOf(() => load({ [property]: value }))
    expect(error.property).toBe(property)
    expect(error.message).toContain(property)
  })

  it('rejects an unknown platform property instead of ignoring a typo', () => {
    const error = configErrorOf(() => load({ 'platform.auth.jwt.secrte': 'x' }))
    expect(error.property).toBe('platform.auth.jwt.secrte')
  })

  it('refuses SameSite=None without Secure cookies', () => {
    const error = configErrorOf(() =>
      load({ 'platform.auth.cookie.same-site': 'None', 'platform.auth.cookie.secure': 'false' }),
    )
    expect(error.property).toBe('platform.auth.cookie.same-site')
  })

  it('turns docs off under the production profile unless enabled explicitly', () => {
    expect(load({ 'platform.profile': 'production' }).docs.enabled).toBe(false)
    expect(load({ 'platform.profile': 'production', 'platform.docs.enabled': 'true' }).docs.enabled).toBe(
      true,
    )
    expect(load({ 'platform.docs.enabled': 'false' }).docs.enabled).toBe(false)
  })

  describe('the JWT secret', () => {
    it.each([
      ['missing', undefined, /is required/],
      ['blank', '   ', /is required/],
      ['not base64', 'this is not base64!!'.repeat(4), /must be base64/],
      ['under 256 bits', Buffer.alloc(31, 7).toString('base64'), /at least 256 bits \(got 248\)/],
    ])('stops startup when %s, naming platform.auth.jwt.secret', (_case, value, message) => {
      const source = value === undefined ? {} : { 'platform.auth.jwt.secret': value }
      const error = configErrorOf(() => loadConfig(source))
      expect(error.property).toBe('platform.auth.jwt.secret')
      expect(error.message).toMatch(/platform\.auth\.jwt\.secret \(PLATFORM_AUTH_JWT_SECRET\)/)
      expect(error.message).toMatch(message)
    })

    it('accepts exactly 256 bits', () => {
      const value = Buffer.alloc(32, 1).toString('base64')
      expect(loadConfig({ 'platform.auth.jwt.secret': value }).auth.jwt.secret).toBe(value)
    })
  })
})

describe('password hashing cost', () => {
  it.each([
    ['platform.auth.password.hash-memory-kib', '19455'],
    ['platform.auth.password.hash-iterations', '1'],
  ])('refuses %s=%s, below OWASP minimum for argon2id, outside the test profile', (property, value) => {
    for (const profile of ['default', 'development', 'production']) {
      const error = configErrorOf(() => load({ 'platform.profile': profile, [property]: value }))
      expect(error.message).toContain(property)
    }
    expect(load({ 'platform.profile': 'test', [property]: value }).profile).toBe('test')
  })

  it('accepts the minimum itself and more', () => {
    const config = load({
      'platform.auth.password.hash-memory-kib': '19456',
      'platform.auth.password.hash-iterations': '3',
    })
    expect(config.auth.password).toMatchObject({ hashMemoryKib: 19456, hashIterations: 3 })
  })
})
