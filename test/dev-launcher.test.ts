import { mkdtemp, readFile, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runNode, waitForOutput } from './helpers/process.ts'

let dataDir: string
beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'platform-dev-'))
})
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true })
})

async function startDev() {
  const dev = runNode('src/dev.ts', [], {
    PLATFORM_DATA_DIR: dataDir,
    PLATFORM_SERVER_PORT: '0',
    LOG_LEVEL: 'warn',
  })
  let output = ''
  dev.child.stdout?.on('data', (chunk) => {
    output += chunk
  })
  await waitForOutput(dev.child, /Sign in: .*\n/)
  const docs = /Interactive docs: +(http:\/\/localhost:\d+\/docs)/.exec(output)?.[1] as string
  return { ...dev, docs, output: () => output }
}

describe('npm run dev', () => {
  it('serves the docs on embedded defaults with a development secret it keeps', async () => {
    const first = await startDev()
    const page = await fetch(first.docs)
    expect(page.status).toBe(200)
    expect(await page.text()).toContain('swagger-ui')
    const api = await fetch(first.docs.replace('/docs', '/v3/api-docs'))
    expect(api.status).toBe(200)
    // The printed demo admin can sign in.
    const demo = JSON.parse(await readFile(path.join(dataDir, 'demo-admin.json'), 'utf8'))
    expect(first.output()).toContain(`Demo admin:        admin@demo.local / ${demo.password}`)
    const login = await fetch(first.docs.replace('/docs', '/api/auth/login'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: demo.email, password: demo.password }),
    })
    expect(login.status).toBe(200)
    first.child.kill('SIGTERM')
    expect((await first.done).code).toBe(0)

    const secretFile = path.join(dataDir, 'dev-jwt-secret')
    const secret = (await readFile(secretFile, 'utf8')).trim()
    expect(Buffer.from(secret, 'base64').length).toBeGreaterThanOrEqual(32)
    expect((await stat(secretFile)).mode & 0o077).toBe(0)

    // A second start reuses the same secret (sessions survive restarts) and the same database.
    const second = await startDev()
    expect((await fetch(second.docs.replace('/docs', '/health/ready'))).status).toBe(200)
    second.child.kill('SIGTERM')
    await second.done
    expect((await readFile(secretFile, 'utf8')).trim()).toBe(secret)
  })
})
