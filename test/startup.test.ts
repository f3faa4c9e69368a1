import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { testSecret } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { runNode, waitForOutput } from './helpers/process.ts'

let dataDir: string
let database: TestDatabase | undefined

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'platform-start-'))
  if (process.env.TEST_DATABASE_URL) database = await createTestDatabase({ migrated: false, poolSize: 2 })
})

afterAll(async () => {
  await database?.dispose()
  await rm(dataDir, { recursive: true, force: true })
})

const baseEnv = () => ({
  PLATFORM_DATA_DIR: dataDir,
  PLATFORM_SERVER_HOST: '127.0.0.1',
  PLATFORM_SERVER_PORT: '0',
  ...(database?.url ? { DATABASE_URL: database.url } : {}),
})

/** Runs an entry point expected to refuse to start; one that serves instead is killed, not left running. */
async function runToRefusal(script: string, args: string[], env: Record<string, string>) {
  const { child, done } = runNode(script, args, env)
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  try {
    return await done
  } finally {
    clearTimeout(timer)
  }
}

describe('npm start', () => {
  it.each([
    ['without a secret', undefined, /is required/],
    ['with a non-base64 secret', 'not*base64*at*all*'.repeat(3), /must be base64/],
    ['with a secret under 256 bits', Buffer.alloc(16, 1).toString('base64'), /at least 256 bits/],
  ])('refuses to start %s, naming platform.auth.jwt.secret', async (_case, secret, reason) => {
    const env: Record<string, string> = baseEnv()
    if (secret !== undefined) env.PLATFORM_AUTH_JWT_SECRET = secret
    const result = await runNode('src/server.ts', [], env).done
    expect(result.code).toBe(1)
    expect(result.stderr).toContain('platform.auth.jwt.secret')
    expect(result.stderr).toMatch(reason)
    expect(result.stderr).not.toMatch(/\n\s+at /)
  })

  it('refuses the embedded database under the production profile, naming platform.datasource.url', async () => {
    const result = await runNode('src/server.ts', [], {
      PLATFORM_DATA_DIR: dataDir,
      PLATFORM_PROFILE: 'production',
      PLATFORM_AUTH_JWT_SECRET: testSecret(),
    }).done
    expect(result.code).toBe(1)
    expect(result.stderr).toContain('platform.datasource.url')
  })

  it('refuses to start with a misspelt PLATFORM_ variable, naming it and the property it resembles', async () => {
    const result = await runToRefusal('src/server.ts', [], {
      ...baseEnv(),
      PLATFORM_AUTH_JWT_SECRET: testSecret(),
      PLATFORM_AUTH_JWT_ACCESS_TOKEN_TLL: '5m',
    })
    expect(result.code).toBe(1)
    expect(result.stderr).toContain('PLATFORM_AUTH_JWT_ACCESS_TOKEN_TLL names no configuration property')
    expect(result.stderr).toContain('platform.auth.jwt.access-token-ttl')
    expect(result.stderr).not.toMatch(/\n\s+at /)
    expect(result.stdout).not.toContain('Server listening')
  })

  it('serves, then shuts down cleanly on SIGTERM', async () => {
    const { child, done } = runNode('src/server.ts', [], {
      ...baseEnv(),
      PLATFORM_AUTH_JWT_SECRET: testSecret(),
    })
    const line = await waitForOutput(child, /Server listening at http:\/\/127\.0\.0\.1:\d+/)
    const base = line.replace('Server listening at ', '')
    const res = await fetch(`${base}/health/ready`)
    expect(res.status).toBe(200)
    child.kill('SIGTERM')
    const result = await done
    expect(result.code).toBe(0)
    expect(result.stdout).toContain('"signal":"SIGTERM"')
  })
})

describe('npm run dev and the CLI', () => {
  it.each([
    ['npm run dev', 'src/dev.ts', []],
    ['the CLI', 'src/cli.ts', ['org', 'list']],
  ])('%s refuses to start with a misspelt PLATFORM_ variable, naming it', async (_entry, script, args) => {
    const result = await runToRefusal(script, args, { ...baseEnv(), PLATFORM_SERVER_PROT: '0' })
    expect(result.code).toBe(1)
    expect(result.stderr).toContain('PLATFORM_SERVER_PROT names no configuration property')
  })
})
