import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { generate, selectPaths, TARGETS } from '../scripts/client-generate.ts'

// The committed client types are what `npm run client:generate` makes from today's document: a
// route or schema change without regenerating fails here.

describe('the generated clients', () => {
  it('are up to date with the document (run npm run client:generate)', async () => {
    const files = await generate()
    expect([...files.keys()].sort()).toEqual(TARGETS.map((t) => t.file).sort())
    for (const [file, contents] of files) {
      expect(await readFile(file, 'utf8'), `${file} is stale: run npm run client:generate`).toBe(contents)
    }
  }, 60_000)

  it('cover exactly auth, permission check, files and configuration: no service token, no project resources', async () => {
    const schema = await readFile('client/src/schema.ts', 'utf8')
    for (const path of [
      '/api/auth/login',
      '/api/auth/refresh',
      '/api/auth/logout',
      '/api/auth/sessions',
      '/api/auth/otp/setup',
      '/api/auth/password-reset/request',
      '/api/authz/check',
      '/api/storage/files',
      '/api/storage/files/{fileId}/confirm',
      '/api/organizations/{orgId}/config',
    ]) {
      expect(schema, path).toContain(`"${path}": {`)
    }
    expect(schema).not.toContain('/api/auth/service-token')
    expect(schema).not.toContain('/api/purchase-requests')
    expect(schema).not.toContain('/api/users')
  })

  it('keep only the component schemas the selected operations reach', () => {
    const document = {
      paths: { '/a': { get: { schema: { $ref: '#/components/schemas/A' } } }, '/b': {} },
      components: {
        schemas: { A: { properties: { b: { $ref: '#/components/schemas/B' } } }, B: {}, C: {} },
      },
    }
    const selected = selectPaths(document, (p) => p === '/a')
    expect(Object.keys(selected.paths)).toEqual(['/a'])
    expect(Object.keys(selected.components?.schemas ?? {})).toEqual(['A', 'B'])
  })
})
