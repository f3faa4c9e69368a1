import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { configFromEnv, configProperties, envName } from '../src/config.ts'
import { ROOT, runNode, START_NODE_FLAGS } from './helpers/process.ts'

// compose.yaml cannot run here (no Docker engine), so it is checked statically: it parses, every
// service the app depends on exists, and every PLATFORM_* variable it sets is a real property.
describe('compose.yaml', () => {
  it('configures the app only with known properties and dependencies that exist', async () => {
    const compose = parse(await readFile(path.join(ROOT, 'compose.yaml'), 'utf8')) as {
      services: Record<string, { environment?: Record<string, string>; depends_on?: Record<string, unknown> }>
    }
    const app = compose.services.app
    expect(app).toBeDefined()
    const env = app?.environment ?? {}
    const known = new Set(configProperties.map(envName))
    for (const variable of Object.keys(env).filter((name) => name.startsWith('PLATFORM_'))) {
      expect(known, variable).toContain(variable)
    }
    expect(Object.keys(configFromEnv(env))).toContain('platform.datasource.url')
    expect(env.PLATFORM_PROFILE).toBe('production')
    for (const dependency of Object.keys(app?.depends_on ?? {})) {
      expect(Object.keys(compose.services)).toContain(dependency)
    }
    // Under production every embedded fallback is refused, so each dependency must be configured.
    for (const required of [
      'PLATFORM_DATASOURCE_URL',
      'PLATFORM_AUTHZ_OPENFGA_API_URL',
      'PLATFORM_STORAGE_S3_ENDPOINT',
      'PLATFORM_MAIL_SMTP_URL',
    ]) {
      expect(Object.keys(env)).toContain(required)
    }
  })

  it("runs the service with npm start's node flags, which this Node accepts", async () => {
    const compose = parse(await readFile(path.join(ROOT, 'compose.yaml'), 'utf8')) as {
      services: Record<string, { build?: { dockerfile_inline?: string } }>
    }
    const cmd = /^CMD (\[.*\])$/m.exec(compose.services.app?.build?.dockerfile_inline ?? '')?.[1]
    expect(cmd).toBeDefined()
    expect(JSON.parse(cmd as string)).toEqual(['node', ...START_NODE_FLAGS, 'src/server.ts'])
    expect(START_NODE_FLAGS).toContain('--heap-growing-percent=100')
    // A V8 flag a Node release no longer knows stops it at start: this one must take them.
    const probe = await runNode(
      '-e',
      ['process.stdout.write(JSON.stringify(process.execArgv))'],
      {},
      undefined,
      START_NODE_FLAGS,
    ).done
    expect(probe.code, probe.stderr).toBe(0)
    expect(JSON.parse(probe.stdout)).toEqual(expect.arrayContaining(START_NODE_FLAGS))
  })
})
