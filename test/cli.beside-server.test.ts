import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { runNode, waitForOutput } from './helpers/process.ts'

// The CLI run beside a live `npm run dev`, as operators do: two real processes on one database
// (this file's PostgreSQL database with TEST_DATABASE_URL, otherwise one embedded directory). What
// the CLI creates works the moment it returns, and an embedded directory is only ever opened by the
// process that holds it.

let database: TestDatabase | undefined
let dataDir: string
let env: Record<string, string>
let dev: ReturnType<typeof runNode>
let base: string
let organizationId: string
let demo: { email: string; password: string }

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'platform-beside-'))
  env = { PLATFORM_DATA_DIR: dataDir, LOG_LEVEL: 'warn', LOG_FORMAT: 'json' }
  if (process.env.TEST_DATABASE_URL) {
    database = await createTestDatabase({ migrated: false, poolSize: 2 })
    env.PLATFORM_DATASOURCE_URL = database.url as string
  }
  dev = runNode('src/dev.ts', [], { ...env, PLATFORM_SERVER_PORT: '0' })
  const banner = await waitForOutput(dev.child, /Sign in: .*\n/)
  base = /(http:\/\/localhost:\d+)\/api\/auth\/login/.exec(banner)?.[1] as string
  demo = JSON.parse(await readFile(path.join(dataDir, 'demo-admin.json'), 'utf8'))
  organizationId = JSON.parse((await cli('org', 'list')).stdout).items[0].organizationId
}, 60_000)

afterAll(async () => {
  dev?.child.kill('SIGTERM')
  await dev?.done
  await database?.dispose()
  await rm(dataDir, { recursive: true, force: true })
})

const cli = (...args: string[]) => runNode('src/cli.ts', args, env).done
const cliWithInput = (stdin: string, ...args: string[]) => runNode('src/cli.ts', args, env, stdin).done

async function signIn(email: string, password: string): Promise<string> {
  const res = await fetch(`${base}/api/auth/login`, {
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

describe('the CLI beside a running server', () => {
  it('prints the demo login that signs in when pasted', async () => {
    await signIn(demo.email, demo.password)
  })

  it('creates an API key that works the moment the command returns', async () => {
    const created = await cli(
      'api-key',
      'create',
      '--org',
      organizationId,
      '--scopes',
      'purchase_requests:read,purchase_requests:write',
      '--description',
      'beside the server',
    )
    expect(created.stderr).toBe('')
    expect(created.code).toBe(0)
    const { rawKey } = JSON.parse(created.stdout)
    const headers = { 'x-api-key': rawKey, 'content-type': 'application/json' }
    const list = await fetch(`${base}/api/purchase-requests`, { headers })
    expect(list.status).toBe(200)
    const create = await fetch(`${base}/api/purchase-requests`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ title: 'Made with a key from the CLI' }),
    })
    expect(create.status).toBe(201)
  })

  it('creates a user who can sign in and read at once', async () => {
    const created = await cliWithInput(
      'a long enough passphrase\n',
      'user',
      'create',
      '--org',
      organizationId,
      '--email',
      'beside@example.com',
      '--role',
      'member',
      '--password-stdin',
    )
    expect(created.code).toBe(0)
    const cookie = await signIn('beside@example.com', 'a long enough passphrase')
    const list = await fetch(`${base}/api/purchase-requests`, { headers: { cookie } })
    expect(list.status).toBe(200)
  })
})

describe.runIf(!process.env.TEST_DATABASE_URL)('one process per embedded database', () => {
  it('lets a second server die on the busy port with one line, leaving the holder and its data alone', async () => {
    const lockBefore = await readFile(path.join(dataDir, 'pglite.lock'), 'utf8')
    const port = new URL(base).port
    const second = await runNode('src/dev.ts', [], { ...env, PLATFORM_SERVER_PORT: port }).done
    expect(second.code).toBe(1)
    expect(second.stderr.trim().split('\n')).toEqual([
      expect.stringContaining(`Port ${port} is already in use`),
    ])
    expect(await readFile(path.join(dataDir, 'pglite.lock'), 'utf8')).toBe(lockBefore)
    expect(JSON.parse(lockBefore).pid).toBe(dev.child.pid)
    // The holder still serves, and what the CLI wrote through it is there.
    const keys = JSON.parse((await cli('api-key', 'list', '--org', organizationId)).stdout)
    expect(keys.items.map((k: { description: string }) => k.description)).toContain('beside the server')
  })

  it('refuses, naming the holder, when the holding process does not answer; never opening the files', async () => {
    const elsewhere = await mkdtemp(path.join(tmpdir(), 'platform-held-'))
    try {
      const closedPort = await new Promise<number>((resolve) => {
        const probe = createServer().listen(0, '127.0.0.1', () => {
          const { port } = probe.address() as { port: number }
          probe.close(() => resolve(port))
        })
      })
      // This test's own process is alive and holds the lock, but serves nothing there.
      await writeFile(
        path.join(elsewhere, 'pglite.lock'),
        JSON.stringify({ pid: process.pid, port: closedPort }),
      )
      const refused = await runNode('src/cli.ts', ['org', 'list'], { ...env, PLATFORM_DATA_DIR: elsewhere })
        .done
      expect(refused.code).not.toBe(0)
      const problem = JSON.parse(refused.stderr.trim().split('\n').pop() as string)
      expect(problem.code).toBe('DATABASE_HELD')
      expect(problem.message).toContain(`held by process ${process.pid}`)
      expect(problem.message).toContain('pglite.lock')
      expect(existsSync(path.join(elsewhere, 'pglite'))).toBe(false)
    } finally {
      await rm(elsewhere, { recursive: true, force: true })
    }
  })

  it('takes over the lock a dead process left behind', async () => {
    const elsewhere = await mkdtemp(path.join(tmpdir(), 'platform-stale-'))
    try {
      await mkdir(path.join(elsewhere, 'pglite'))
      // A pid that no longer runs: a child that has exited and been reaped.
      const stalePid = await exitedPid()
      await writeFile(path.join(elsewhere, 'pglite.lock'), JSON.stringify({ pid: stalePid, port: 1 }))
      const migrated = await runNode('src/cli.ts', ['migrate'], { ...env, PLATFORM_DATA_DIR: elsewhere }).done
      expect(migrated.code).toBe(0)
      expect(JSON.parse(migrated.stdout).applied).toContain('0001_organizations')
      // Released on exit.
      expect(existsSync(path.join(elsewhere, 'pglite.lock'))).toBe(false)
    } finally {
      await rm(elsewhere, { recursive: true, force: true })
    }
  })
})

/** The pid of a process that has exited. */
async function exitedPid(): Promise<number> {
  const child = runNode('-e', ['0'], {})
  await child.done
  return child.child.pid as number
}
