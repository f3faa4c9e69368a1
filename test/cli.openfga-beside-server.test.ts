import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { initializeOpenFga } from '../src/authz/init.ts'
import { loadModel } from '../src/authz/model.ts'
import { OpenFgaAuthorization } from '../src/authz/openfga.ts'
import { FAST_LOGIN_CONFIG } from './helpers/accounts.ts'
import { testSecret } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { type OpenFgaServer, openFgaAvailable, startOpenFga } from './helpers/openfga-server.ts'
import { runNode } from './helpers/process.ts'
import { envOf, type ServiceProcess, startService } from './helpers/service-process.ts'

// The service configured for a real OpenFGA server (the version compose.yaml pins), with the CLI
// run beside it as operators run it: two processes on one database (this file's PostgreSQL database
// with TEST_DATABASE_URL, otherwise an embedded directory the service holds). What `user create` and
// `api-key create` make is in effect the moment the command returns, and a purchase request created
// over HTTP is readable by its creator at once, its tuple going through the outbox to OpenFGA.

const TIMEOUT_MS = 90_000

let openfga: OpenFgaServer | undefined
let port: OpenFgaAuthorization | undefined
let database: TestDatabase | undefined
let dataDir: string | undefined
let service: ServiceProcess | undefined
let env: Record<string, string>
let organizationId: string

const cli = (args: string[], stdin?: string) => runNode('src/cli.ts', args, env, stdin).done

async function signIn(email: string, password: string): Promise<string> {
  const res = await fetch(`${service?.base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: email, password }),
  })
  expect(res.status).toBe(200)
  return res.headers
    .getSetCookie()
    .map((c) => c.split(';')[0])
    .join('; ')
}

function call(headers: Record<string, string>, method: string, url: string, body?: unknown) {
  return fetch(`${service?.base}${url}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
}

describe.runIf(openFgaAvailable)('the CLI beside a service on OpenFGA', { timeout: TIMEOUT_MS }, () => {
  beforeAll(async () => {
    openfga = await startOpenFga()
    const ids = await initializeOpenFga(openfga.url, undefined, await loadModel())
    port = new OpenFgaAuthorization({ apiUrl: openfga.url, ...ids })
    dataDir = await mkdtemp(path.join(tmpdir(), 'platform-openfga-'))
    env = {
      ...envOf({
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.data-dir': dataDir,
        'platform.authz.openfga.api-url': openfga.url,
        'platform.authz.openfga.store-id': ids.storeId,
        'platform.authz.openfga.model-id': ids.modelId,
      }),
      LOG_LEVEL: 'warn',
    }
    if (process.env.TEST_DATABASE_URL) {
      database = await createTestDatabase({ migrated: false, poolSize: 2 })
      env.PLATFORM_DATASOURCE_URL = database.url as string
    }
    service = await startService({ env, readyWithinMs: 60_000 })
    const created = await cli(['org', 'create', '--name', 'Beside OpenFGA'])
    expect(created.stderr).toBe('')
    organizationId = JSON.parse(created.stdout).organizationId
  }, TIMEOUT_MS)

  afterAll(async () => {
    await service?.stop()
    await port?.close()
    await openfga?.stop()
    await database?.dispose()
    if (dataDir) await rm(dataDir, { recursive: true, force: true })
  })

  /** `user create` of a member of the organization, its password on stdin. */
  const createMember = (email: string, password: string) =>
    cli(
      ['user', 'create', '--org', organizationId, '--email', email, '--role', 'member', '--password-stdin'],
      `${password}\n`,
    )

  /** Asked of OpenFGA itself, not through the service (whose checks deliver a queued change first). */
  const memberAtOpenFga = (subject: string) =>
    port?.check({ user: subject, relation: 'member', object: `organization:${organizationId}` })

  it('creates a user whose membership is at OpenFGA when the command returns, who signs in and reads', async () => {
    const created = await createMember('beside-openfga@example.com', 'a long enough passphrase')
    expect(created.stderr).toBe('')
    expect(created.code).toBe(0)
    const { userId } = JSON.parse(created.stdout)
    expect(await memberAtOpenFga(`user:${userId}`)).toBe(true)

    const cookie = await signIn('beside-openfga@example.com', 'a long enough passphrase')
    const list = await call({ cookie }, 'GET', '/api/purchase-requests')
    expect(list.status).toBe(200)
  })

  it('creates an API key that lists, creates and reads the moment the command returns', async () => {
    const created = await cli([
      'api-key',
      'create',
      '--org',
      organizationId,
      '--scopes',
      'purchase_requests:read,purchase_requests:write',
      '--description',
      'beside OpenFGA',
    ])
    expect(created.stderr).toBe('')
    expect(created.code).toBe(0)
    const { id, rawKey } = JSON.parse(created.stdout)
    expect(await memberAtOpenFga(`api_key:${id}`)).toBe(true)

    const headers = { 'x-api-key': rawKey }
    expect((await call(headers, 'GET', '/api/purchase-requests')).status).toBe(200)
    const request = await call(headers, 'POST', '/api/purchase-requests', { title: 'Made with a CLI key' })
    expect(request.status).toBe(201)
    const { id: requestId } = (await request.json()) as { id: string }
    const read = await call(headers, 'GET', `/api/purchase-requests/${requestId}`)
    expect(read.status).toBe(200)
  })

  it("answers 200 to a creator's read right after each create", async () => {
    const created = await createMember('creator-openfga@example.com', 'another long passphrase')
    expect(created.code).toBe(0)
    const cookie = await signIn('creator-openfga@example.com', 'another long passphrase')
    for (let i = 0; i < 10; i++) {
      const request = await call({ cookie }, 'POST', '/api/purchase-requests', { title: `Desk ${i}` })
      expect(request.status).toBe(201)
      const { id } = (await request.json()) as { id: string }
      const read = await call({ cookie }, 'GET', `/api/purchase-requests/${id}`)
      expect(read.status, await read.clone().text()).toBe(200)
      expect(((await read.json()) as { id: string }).id).toBe(id)
    }
  })
})
