import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openPGlite } from '../src/db/database.ts'
import { requirePrincipal } from '../src/principal.ts'
import { createTestApp, type TestApp, testSecret } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { filesReadRoute } from './helpers/machines.ts'
import { type Finished, runNode } from './helpers/process.ts'

// Each CLI command is a process that starts the app on the embedded database (about 5 s on PGlite
// on a loaded 2-core machine), and a test runs up to five of them in sequence.
const CLI_TEST_TIMEOUT_MS = 90_000

// The raw API key, the client secret and the issued service token are shown once, to whoever asked
// for them, and never again: not in the logs, not in a later response, not in a listing. The
// credentials are made by the CLI as a real process and used over HTTP by an app on
// the same database: real PostgreSQL with TEST_DATABASE_URL, otherwise the CLI's own PGlite
// directory, opened in-process only while no CLI process runs (PGlite is single-process).

let shared: TestDatabase | undefined
let dataDir: string
let env: Record<string, string>
let organizationId: string

const cli = (...args: string[]) => runNode('src/cli.ts', args, env).done

function printed(result: Finished): Record<string, unknown> {
  expect(result.stderr).toBe('')
  expect(result.code).toBe(0)
  return JSON.parse(result.stdout)
}

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'platform-machine-secrets-'))
  env = { PLATFORM_AUTH_JWT_SECRET: testSecret(), PLATFORM_DATA_DIR: dataDir, LOG_LEVEL: 'warn' }
  if (process.env.TEST_DATABASE_URL) {
    shared = await createTestDatabase({ poolSize: 4 })
    env.PLATFORM_DATASOURCE_URL = shared.url as string
  }
  organizationId = printed(await cli('org', 'create', '--name', 'Integrations Inc')).organizationId as string
})

afterAll(async () => {
  await shared?.dispose()
  await rm(dataDir, { recursive: true, force: true })
})

/** An in-process app on the CLI's database, with a route a machine principal may call. */
async function withApp<T>(fn: (t: TestApp) => Promise<T>): Promise<T> {
  const database = shared ?? (await pgliteOfTheCli())
  const t = await createTestApp({
    database,
    configure: async (app: FastifyInstance) => {
      await app.register(async (feature) => {
        feature.get(
          '/api/test/scoped',
          filesReadRoute('testScoped', {
            response: { 200: Type.Object({ type: Type.String(), id: Type.String() }) },
          }),
          async (request) => {
            const principal = requirePrincipal(request)
            return { type: principal.type, id: principal.id }
          },
        )
      })
    },
  })
  try {
    return await fn(t)
  } finally {
    await t.close()
    if (!shared) await database.dispose()
  }
}

async function pgliteOfTheCli(): Promise<TestDatabase> {
  const handle = await openPGlite(path.join(dataDir, 'pglite'))
  return { handle, url: undefined, dispose: () => handle.close() }
}

const sha256 = (value: string) => createHash('sha256').update(value).digest('hex')

describe('machine secrets', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('never show the raw API key, the client secret or an issued token again, in logs or responses', async () => {
    const key = printed(
      await cli(
        'api-key',
        'create',
        '--org',
        organizationId,
        '--scopes',
        'files:read',
        '--description',
        'ERP',
      ),
    )
    const account = printed(
      await cli(
        'service-account',
        'create',
        '--client-id',
        'billing-backend',
        '--description',
        'Billing',
        '--scopes',
        'files:read',
      ),
    )
    const rawKey = key.rawKey as string
    const clientSecret = account.clientSecret as string
    const wrongSecret = `${clientSecret.slice(0, -4)}oops`

    const { accessToken, later, logs } = await withApp(async (t) => {
      const issued = await t.app.inject({
        method: 'POST',
        url: '/api/auth/service-token',
        payload: { clientId: account.clientId, clientSecret },
      })
      expect(issued.statusCode).toBe(200)
      const token = issued.json().accessToken as string

      const responses = [
        await t.app.inject({
          method: 'POST',
          url: '/api/auth/service-token',
          payload: { clientId: account.clientId, clientSecret: wrongSecret },
        }),
        await t.app.inject({ method: 'GET', url: '/api/test/scoped', headers: { 'x-api-key': rawKey } }),
        await t.app.inject({
          method: 'GET',
          url: '/api/test/scoped',
          headers: { authorization: `Bearer ${token}` },
        }),
        await t.app.inject({ method: 'GET', url: '/v3/api-docs' }),
      ]
      expect(responses.map((res) => res.statusCode)).toEqual([401, 200, 200, 200])
      expect(responses[1]?.json()).toEqual({ type: 'API_KEY', id: key.id })
      expect(responses[2]?.json()).toEqual({ type: 'SERVICE_ACCOUNT', id: account.id })

      await t.app.services.apiKeys.flushLastUse()
      const listed = await t.app.services.apiKeys.list(organizationId)
      expect(listed).toHaveLength(1)
      expect(Object.keys(listed[0] ?? {}).sort()).toEqual([
        'createdAt',
        'description',
        'expiresAt',
        'id',
        'keyPrefix',
        'lastUsedAt',
        'revokedAt',
        'scopes',
      ])
      expect(listed[0]?.keyPrefix).toBe(key.keyPrefix)

      return {
        accessToken: token,
        later: [...responses.map((res) => res.body), JSON.stringify(listed)],
        logs: t.logs.text(),
      }
    })

    const listing = await cli('api-key', 'list', '--org', organizationId)
    const items = printed(listing).items as Record<string, unknown>[]
    expect(items.map((item) => item.id)).toEqual([key.id])
    expect(items[0]).not.toHaveProperty('rawKey')
    expect(items[0]).not.toHaveProperty('keyHash')
    expect(listing.stdout).not.toMatch(/rawKey|key_?hash/i)

    // The requests were logged, so their absence below means something.
    expect(logs).toContain('/api/auth/service-token')
    const secrets = [
      rawKey,
      rawKey.slice('sk_live_'.length),
      sha256(rawKey),
      clientSecret,
      wrongSecret,
      sha256(clientSecret),
      accessToken,
      accessToken.split('.')[2] as string,
    ]
    for (const secret of secrets) {
      expect(logs).not.toContain(secret)
      for (const body of later) expect(body).not.toContain(secret)
      expect(listing.stdout).not.toContain(secret)
      expect(listing.stderr).not.toContain(secret)
    }
  })

  it('are managed by CLI commands that print the documented JSON', async () => {
    const expiresAt = new Date(Date.now() + 24 * 60 * 60 * 1000).toISOString()
    const key = printed(
      await cli(
        'api-key',
        'create',
        '--org',
        organizationId,
        '--scopes',
        'files:read,files:write',
        '--description',
        'Short-lived',
        '--expires-at',
        expiresAt,
      ),
    )
    expect(Object.keys(key).sort()).toEqual(['id', 'keyPrefix', 'rawKey'])
    expect(key.rawKey).toMatch(/^sk_live_[A-Za-z0-9_-]{43,}$/)

    const revoked = printed(await cli('api-key', 'revoke', '--id', key.id as string))
    expect(revoked).toEqual({ id: key.id, revokedAt: expect.any(String) })
    expect(new Date(revoked.revokedAt as string).toISOString()).toBe(revoked.revokedAt)

    const { items } = printed(await cli('api-key', 'list', '--org', organizationId)) as {
      items: Record<string, unknown>[]
    }
    expect(items.find((item) => item.id === key.id)).toEqual({
      id: key.id,
      keyPrefix: key.keyPrefix,
      scopes: ['files:read', 'files:write'],
      description: 'Short-lived',
      createdAt: expect.any(String),
      expiresAt,
      revokedAt: revoked.revokedAt,
      lastUsedAt: null,
    })

    const account = printed(
      await cli(
        'service-account',
        'create',
        '--client-id',
        'reporting-backend',
        '--description',
        'Reports',
        '--scopes',
        'files:read,purchase_requests:read',
      ),
    )
    expect(account).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      clientId: 'reporting-backend',
      clientSecret: expect.stringMatching(/^[A-Za-z0-9_-]{43,}$/),
    })
    const disabled = printed(await cli('service-account', 'disable', '--client-id', 'reporting-backend'))
    expect(disabled).toEqual({
      id: account.id,
      clientId: 'reporting-backend',
      disabledAt: expect.any(String),
    })
  })

  const NO_SUCH_ID = '00000000-0000-4000-8000-000000000000'
  it.each([
    [
      ['api-key', 'create', '--org', NO_SUCH_ID, '--scopes', 'files:read,files:delete', '--description', 'D'],
      'VALIDATION_FAILED',
      /files:delete/,
    ],
    [
      ['api-key', 'create', '--org', NO_SUCH_ID, '--scopes', 'files:read', '--description', 'D'],
      'NOT_FOUND',
      /organization/,
    ],
    [['api-key', 'revoke', '--id', 'not-a-uuid'], 'USAGE', /--id/],
    [['api-key', 'revoke', '--id', NO_SUCH_ID], 'NOT_FOUND', /API key/],
    [
      ['service-account', 'create', '--client-id', 'scoped-badly', '--description', 'D', '--scopes', 'root'],
      'VALIDATION_FAILED',
      /root/,
    ],
    [['service-account', 'disable', '--client-id', 'nobody-here'], 'NOT_FOUND', /service account/],
  ])('fail %j with a JSON error on stderr and a non-zero exit', async (args, code, message) => {
    const result = await cli(...args)
    expect(result.code).not.toBe(0)
    expect(result.stdout).toBe('')
    const error = JSON.parse(result.stderr.trim().split('\n').pop() as string)
    expect(Object.keys(error).sort()).toEqual(['code', 'message'])
    expect(error.code).toBe(code)
    expect(error.message).toMatch(message)
  })
})
