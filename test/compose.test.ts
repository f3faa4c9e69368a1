import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { configFromEnv, configProperties, envName } from '../src/config.ts'
import { ROOT } from './helpers/process.ts'

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
})
