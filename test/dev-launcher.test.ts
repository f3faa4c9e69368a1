import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises'
import { networkInterfaces, tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { parseSigningKey } from '../src/security/signing-keys.ts'
import { runNode, waitForOutput } from './helpers/process.ts'

let dataDir: string
beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'platform-dev-'))
})
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true })
})

async function startDev(env: Record<string, string> = {}) {
  const dev = runNode('src/dev.ts', [], {
    PLATFORM_DATA_DIR: dataDir,
    PLATFORM_SERVER_PORT: '0',
    LOG_LEVEL: 'warn',
    ...env,
  })
  let output = ''
  dev.child.stdout?.on('data', (chunk) => {
    output += chunk
  })
  await waitForOutput(dev.child, /Sign in: .*\n/)
  const docs = /Interactive docs: +(http:\/\/localhost:\d+\/docs)/.exec(output)?.[1] as string
  return { ...dev, docs, output: () => output }
}

// A process on the embedded database starts by running every migration: beside parallel test files
// on two cores that takes longer than the suite's default test time.
vi.setConfig({ testTimeout: 90_000 })

describe('npm run dev', () => {
  it('serves the docs on embedded defaults with a development secret it keeps', async () => {
    const first = await startDev()
    const page = await fetch(first.docs)
    expect(page.status).toBe(200)
    expect(await page.text()).toContain('swagger-ui')
    const api = await fetch(first.docs.replace('/docs', '/v3/api-docs'))
    expect(api.status).toBe(200)
    // The root is the demo console, its script bundled at start.
    const root = await fetch(first.docs.replace('/docs', '/'))
    expect(root.status).toBe(200)
    expect(await root.text()).toContain('<script type="module" src="/console/app.js">')
    const script = await fetch(first.docs.replace('/docs', '/console/app.js'))
    expect(script.status).toBe(200)
    expect((await script.text()).length).toBeGreaterThan(10_000)
    expect(first.output()).toContain('Demo console:')
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

describe('npm run dev with an asymmetric algorithm', () => {
  it('generates a signing key into the data folder (0600), publishes it, and makes the public URL the issuer', async () => {
    const dev = await startDev({ PLATFORM_AUTH_JWT_ALGORITHM: 'ES256' })
    const base = dev.docs.replace('/docs', '')
    try {
      const keyFile = path.join(dataDir, 'dev-jwt-es256.pem')
      expect((await stat(keyFile)).mode & 0o077).toBe(0)
      const { kid } = parseSigningKey(await readFile(keyFile, 'utf8'))
      const jwks = (await (await fetch(`${base}/.well-known/jwks.json`)).json()) as {
        keys: { kid: string }[]
      }
      expect(jwks.keys.map((key) => key.kid)).toEqual([kid])
      const metadata = await (await fetch(`${base}/.well-known/openid-configuration`)).json()
      expect(metadata).toMatchObject({ issuer: base, token_endpoint: `${base}/oauth2/token` })
    } finally {
      dev.child.kill('SIGTERM')
      await dev.done
    }
  })
})

describe('the first minute of a new user', () => {
  it('prints a sign-in line that works when pasted, follows the bound port in links and logs for humans', async () => {
    const own = await mkdtemp(path.join(tmpdir(), 'platform-dev-first-'))
    const dev = runNode('src/dev.ts', [], { PLATFORM_DATA_DIR: own, PORT: '0', LOG_LEVEL: 'info' })
    try {
      const banner = await waitForOutput(dev.child, /Sign in: .*\n/)
      // The printed curl line carries the real password: pasted, it signs in.
      const [, body, url] = /-d '(\{.*\})' (http:\/\/localhost:\d+\/api\/auth\/login)/.exec(banner) ?? []
      const login = await fetch(url as string, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: body as string,
      })
      expect(login.status).toBe(200)
      const base = new URL(url as string).origin

      // Port 0 became a real port before the app was built: email links name it.
      const reset = await fetch(`${base}/api/auth/password-reset/request`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: 'admin@demo.local' }),
      })
      expect(reset.status).toBe(202)
      const mail = await waitForMail(path.join(own, 'mail'))
      expect(mail).toContain(`${base}/reset-password?token=`)

      // Bound to loopback only.
      const outside = Object.values(networkInterfaces())
        .flat()
        .find((a) => a && a.family === 'IPv4' && !a.internal)
      if (outside) {
        const port = new URL(base).port
        await expect(fetch(`http://${outside.address}:${port}/health/live`)).rejects.toThrow()
      }
    } finally {
      dev.child.kill('SIGTERM')
      await dev.done
      await rm(own, { recursive: true, force: true })
    }
    const { stdout } = await dev.done
    // Human-readable lines, not JSON.
    expect(stdout).toMatch(/\[\d\d:\d\d:\d\d\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+/)
    expect(stdout).not.toContain('{"level":30')
  })
})

/** The first .eml file the embedded sink writes into `directory`. */
async function waitForMail(directory: string): Promise<string> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const files = await readdir(directory).catch(() => [] as string[])
    const eml = files.find((f) => f.endsWith('.eml'))
    // Quoted-printable soft line breaks undone, so a link reads whole.
    if (eml) return (await readFile(path.join(directory, eml), 'utf8')).replace(/=\r?\n/g, '')
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`no mail in ${directory}`)
}
