import { createHash, randomUUID } from 'node:crypto'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import { describe, expect, it } from 'vitest'
import { requireTenant } from '../src/context.ts'
import { newOrganization, UUID, userAccessToken } from './helpers/accounts.ts'
import { createTestApp, type TestApp, useTestApp } from './helpers/app.ts'
import { queuedChangesOf } from './helpers/authz.ts'
import { filesReadRoute, newApiKey, protectedTestRoutes } from './helpers/machines.ts'
import { pollUntil } from './helpers/poll.ts'

// API keys: provisioning that keeps only a hash, the authorization tuples queued
// with the key, the API_KEY principal and its organization, rejection without a distinct reason,
// scopes, the one-principal rule (src/http/auth.ts), batched last use and revocation.

// The protected test scope, and a tenant route whose JSON body makes the handler run from the body
// parser's async context.
const testRoutes = protectedTestRoutes((feature) => {
  feature.post(
    '/api/test/tenant',
    filesReadRoute('testTenant', {
      body: Type.Object({ note: Type.String() }),
      response: { 200: Type.Object({ organizationId: Type.String(), note: Type.String() }) },
    }),
    async (request) => ({ organizationId: requireTenant(), note: (request.body as { note: string }).note }),
  )
})

const t = useTestApp({ configure: testRoutes })

const sha256 = (value: string) => createHash('sha256').update(value).digest('hex')

async function newKey(
  options: {
    organizationId?: string
    scopes?: string[]
    expiresAt?: Date | null
    app?: FastifyInstance
  } = {},
) {
  const app = options.app ?? t.app
  const organizationId = options.organizationId ?? (await newOrganization(app))
  return newApiKey(app, organizationId, options.scopes ?? ['files:read'], {
    description: 'partner integration',
    expiresAt: options.expiresAt ?? null,
  })
}

function scoped(headers: Record<string, string>, options: Partial<InjectOptions> = {}, app = t.app) {
  return app.inject({ method: 'GET', url: '/api/test/scoped', headers, ...options })
}

const storedKey = (id: string) =>
  t.app.db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

function expectSameAs(res: LightMyRequestResponse, reference: LightMyRequestResponse) {
  expect(res.statusCode).toBe(reference.statusCode)
  expect(res.headers['content-type']).toBe(reference.headers['content-type'])
  expect(res.json()).toEqual(reference.json())
}

function userCookie(organizationId: string): { access_token: string } {
  return { access_token: userAccessToken(t.app, organizationId) }
}

describe('API key provisioning', () => {
  it('returns a prefixed raw key of 32 random bytes once, and a displayable key prefix', async () => {
    const key = await newKey()
    expect(key.id).toMatch(UUID)
    expect(key.rawKey).toMatch(/^sk_live_[A-Za-z0-9_-]{43,}$/)
    expect(key.keyPrefix.startsWith('sk_live_')).toBe(true)
    expect(key.rawKey.startsWith(key.keyPrefix)).toBe(true)
    expect(key.keyPrefix.length).toBeLessThan(key.rawKey.length)
    const other = await newKey({ organizationId: key.organizationId })
    expect(other.rawKey).not.toBe(key.rawKey)
  })

  it('stores only the SHA-256 of the raw key', async () => {
    const key = await newKey()
    const row = await storedKey(key.id)
    expect(row.key_hash).toBe(sha256(key.rawKey))
    expect(row.key_prefix).toBe(key.keyPrefix)
    for (const value of Object.values(row)) {
      expect(JSON.stringify(value) ?? '').not.toContain(key.rawKey)
      expect(JSON.stringify(value) ?? '').not.toContain(key.rawKey.slice('sk_live_'.length))
    }
  })

  it('queues membership tuples with the key, admin for a write scope, and their deletion on revocation', async () => {
    const outbox = (id: string) => queuedChangesOf(t.app, `api_key:${id}`)

    const reader = await newKey({ scopes: ['files:read'] })
    const readerTuple = { subject: `api_key:${reader.id}`, object: `organization:${reader.organizationId}` }
    expect(await outbox(reader.id)).toEqual([{ operation: 'write', relation: 'member', ...readerTuple }])

    const writer = await newKey({ scopes: ['files:read', 'files:write'] })
    const writerTuple = { subject: `api_key:${writer.id}`, object: `organization:${writer.organizationId}` }
    expect(await outbox(writer.id)).toEqual([
      { operation: 'write', relation: 'member', ...writerTuple },
      { operation: 'write', relation: 'admin', ...writerTuple },
    ])

    const first = await t.app.services.apiKeys.revoke(writer.id)
    // Revoking again answers the same and queues nothing more.
    expect(await t.app.services.apiKeys.revoke(writer.id)).toEqual(first)
    expect((await outbox(writer.id)).filter((change) => change.operation === 'delete')).toEqual([
      { operation: 'delete', relation: 'member', ...writerTuple },
      { operation: 'delete', relation: 'admin', ...writerTuple },
    ])
  })

  it('refuses an unknown scope and an expiry in the past with VALIDATION_FAILED', async () => {
    const organizationId = await newOrganization(t.app)
    const create = (scopes: string[], expiresAt: Date | null) =>
      t.app.services.apiKeys.create({ organizationId, scopes, description: 'bad', expiresAt })
    await expect(create(['files:read', 'files:delete'], null)).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    })
    await expect(create(['files:read'], new Date(t.clock.now().getTime() - 1000))).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    })
    expect(await t.app.services.apiKeys.list(organizationId)).toEqual([])
  })
})

describe('API key authentication', () => {
  it("authenticates an API_KEY principal whose id is the key id and whose organization is the key's", async () => {
    const key = await newKey({ scopes: ['files:read', 'config:read'] })
    const res = await scoped({ 'x-api-key': key.rawKey })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      type: 'API_KEY',
      id: key.id,
      organizationId: key.organizationId,
      scopes: ['config:read', 'files:read'],
    })
  })

  it("runs the handler in the key's organization", async () => {
    const key = await newKey()
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/test/tenant',
      headers: { 'x-api-key': key.rawKey },
      payload: { note: 'from a body' },
    })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ organizationId: key.organizationId, note: 'from a body' })
  })

  it('treats a key without the prefix, unknown, revoked or expired exactly like no key at all', async () => {
    const noKey = await scoped({})
    expect(noKey.statusCode).toBe(401)
    expect(noKey.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })

    const valid = await newKey()
    const revoked = await newKey()
    await t.app.services.apiKeys.revoke(revoked.id)
    const expiring = await newKey({ expiresAt: new Date(t.clock.now().getTime() + 60_000) })
    expect((await scoped({ 'x-api-key': expiring.rawKey })).statusCode).toBe(200)
    t.clock.advanceSeconds(120)

    const presented = [
      valid.rawKey.slice('sk_live_'.length),
      `sk_live_${valid.rawKey.slice('sk_live_'.length).split('').reverse().join('')}`,
      revoked.rawKey,
      expiring.rawKey,
    ]
    for (const rawKey of presented) expectSameAs(await scoped({ 'x-api-key': rawKey }), noKey)
    expect((await scoped({ 'x-api-key': valid.rawKey })).statusCode).toBe(200)
  })

  it("answers 403 INSUFFICIENT_SCOPE to a key without the route's scope", async () => {
    const key = await newKey({ scopes: ['purchase_requests:read'] })
    const res = await scoped({ 'x-api-key': key.rawKey })
    expect(res.statusCode).toBe(403)
    expect(res.json()).toMatchObject({ code: 'INSUFFICIENT_SCOPE' })
  })

  it('honours the configured header name and prefix', async () => {
    const custom = await createTestApp({
      database: t.database,
      config: {
        'platform.auth.api-key.header-name': 'X-Partner-Key',
        'platform.auth.api-key.prefix': 'pk_test_',
      },
      configure: testRoutes,
    })
    try {
      const key = await newKey({ app: custom.app })
      expect(key.rawKey).toMatch(/^pk_test_[A-Za-z0-9_-]{43,}$/)
      expect(key.keyPrefix.startsWith('pk_test_')).toBe(true)

      const accepted = await scoped({ 'x-partner-key': key.rawKey }, {}, custom.app)
      expect(accepted.statusCode).toBe(200)
      expect(accepted.json()).toMatchObject({ type: 'API_KEY', id: key.id })
      // The default header is not read, and a key with the default prefix is not a key here.
      expect((await scoped({ 'x-api-key': key.rawKey }, {}, custom.app)).statusCode).toBe(401)
      const defaultKey = await newKey()
      expect((await scoped({ 'x-partner-key': defaultKey.rawKey }, {}, custom.app)).statusCode).toBe(401)
    } finally {
      await custom.close()
    }
  })
})

describe('one principal per request', () => {
  it('refuses an API key together with an Authorization header, even when both are valid', async () => {
    const key = await newKey()
    const account = await t.app.services.serviceAccounts.create({
      clientId: 'both-headers',
      description: 'a backend',
      scopes: ['files:read'],
    })
    const token = (await t.app.services.serviceAccounts.issueToken(account.clientId, account.clientSecret))
      .token
    expect((await scoped({ authorization: `Bearer ${token}` })).statusCode).toBe(200)
    expect((await scoped({ 'x-api-key': key.rawKey })).statusCode).toBe(200)

    const res = await scoped({ 'x-api-key': key.rawKey, authorization: `Bearer ${token}` })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })

  it('prefers an API key to the ambient access cookie', async () => {
    const key = await newKey()
    const cookies = userCookie(randomUUID())
    expect((await scoped({}, { cookies })).json()).toMatchObject({ type: 'USER' })

    const res = await scoped({ 'x-api-key': key.rawKey }, { cookies })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ type: 'API_KEY', id: key.id, organizationId: key.organizationId })
  })

  it('never falls back to the access cookie when the API key is invalid', async () => {
    const cookies = userCookie(randomUUID())
    const res = await scoped({ 'x-api-key': 'sk_live_not-a-key' }, { cookies })
    expect(res.statusCode).toBe(401)
    expect(res.json()).toMatchObject({ code: 'AUTHENTICATION_REQUIRED' })
  })
})

describe('API key use and revocation', () => {
  it('records the last use in a batch, never as a write per request', async () => {
    const key = await newKey()
    for (let i = 0; i < 3; i++) expect((await scoped({ 'x-api-key': key.rawKey })).statusCode).toBe(200)
    expect((await storedKey(key.id)).last_used_at).toBeNull()

    await t.app.services.apiKeys.flushLastUse()
    expect((await storedKey(key.id)).last_used_at?.toISOString()).toBe(t.clock.now().toISOString())
    const [listed] = await t.app.services.apiKeys.list(key.organizationId)
    expect(listed?.lastUsedAt).toBe(t.clock.now().toISOString())
  })

  it('stops accepting a key at once on the instance that revokes it', async () => {
    const key = await newKey()
    expect((await scoped({ 'x-api-key': key.rawKey })).statusCode).toBe(200)

    const revoked = await t.app.services.apiKeys.revoke(key.id)
    expect(revoked).toEqual({ id: key.id, revokedAt: t.clock.now().toISOString() })
    expect((await scoped({ 'x-api-key': key.rawKey })).statusCode).toBe(401)
    await expect(t.app.services.apiKeys.revoke(randomUUID())).rejects.toMatchObject({ code: 'NOT_FOUND' })
  })

  it('pushes a revocation to another instance that had the key cached', async () => {
    let other: TestApp | undefined
    try {
      // An hour of trust: only the pushed revocation can end the cached key within this test.
      other = await createTestApp({
        database: t.database,
        configure: testRoutes,
        config: { 'platform.auth.revocation.fallback-ttl': '1h' },
      })
      const key = await newKey()
      const control = await newKey()
      expect((await scoped({ 'x-api-key': key.rawKey }, {}, other.app)).statusCode).toBe(200)
      expect((await scoped({ 'x-api-key': control.rawKey }, {}, other.app)).statusCode).toBe(200)

      await t.app.services.apiKeys.revoke(key.id)
      expect((await scoped({ 'x-api-key': key.rawKey })).statusCode).toBe(401)
      const otherApp = other.app
      await pollUntil(
        'the other instance refusing the revoked key',
        async () => (await scoped({ 'x-api-key': key.rawKey }, {}, otherApp)).statusCode === 401,
        30_000,
        5,
      )
      // Only the revoked key was dropped: the other one is still served.
      expect((await scoped({ 'x-api-key': control.rawKey }, {}, other.app)).statusCode).toBe(200)

      // An instance that never saw the key reads the revocation from the database.
      const fresh = await createTestApp({ database: t.database, configure: testRoutes })
      try {
        expect((await scoped({ 'x-api-key': key.rawKey }, {}, fresh.app)).statusCode).toBe(401)
      } finally {
        await fresh.close()
      }
    } finally {
      await other?.close()
    }
  })
})
