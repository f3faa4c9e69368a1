import { spawnSync } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ErrorCatalogue } from '../src/errors.ts'
import { newUser, signIn } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'

// The document as a product: what a generated client needs from /v3/api-docs.
// Each assertion is something a generator run against the earlier document got wrong.

interface Operation {
  parameters?: { name: string; in: string; required?: boolean }[]
  responses: Record<string, { description: string; headers?: Record<string, unknown> }>
  security?: unknown[]
}
interface Document {
  paths: Record<string, Record<string, Operation>>
  components: { schemas: Record<string, { properties?: Record<string, { enum?: string[] }> }> }
}

let t: TestApp
let document: Document
const ORIGIN = 'https://app.example'

beforeAll(async () => {
  t = await createTestApp({ config: { 'platform.web.cors.allowed-origins': ORIGIN } })
  document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
})
afterAll(async () => {
  await t?.close()
})

const operations = () =>
  Object.entries(document.paths).flatMap(([p, item]) =>
    Object.entries(item).map(([method, operation]) => ({ name: `${method.toUpperCase()} ${p}`, operation })),
  )

describe('the OpenAPI document as a client is generated from it', () => {
  it('passes `redocly lint` (recommended ruleset, redocly.yaml) with no error and no warning', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'platform-lint-'))
    try {
      const file = path.join(dir, 'openapi.json')
      await writeFile(file, JSON.stringify(document))
      const lint = spawnSync(
        path.resolve('node_modules/.bin/redocly'),
        ['lint', '--config', path.resolve('redocly.yaml'), '--format', 'json', file],
        {
          encoding: 'utf8',
          env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
        },
      )
      const report = JSON.parse(lint.stdout) as {
        totals: { errors: number; warnings: number }
        problems: unknown[]
      }
      expect(report.problems).toEqual([])
      expect(report.totals).toMatchObject({ errors: 0, warnings: 0 })
      expect(lint.status).toBe(0)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('names every resource a client handles as a component schema', () => {
    expect(Object.keys(document.components.schemas)).toEqual(
      expect.arrayContaining([
        'Problem',
        'LoginRequest',
        'SessionResponse',
        'SessionItem',
        'SessionList',
        'FileRecord',
        'Upload',
        'FileList',
        'DownloadUrl',
        'ConfigEntry',
        'ConfigEntryList',
        'PurchaseRequestPage',
        'OtpSetup',
        'OtpEnableRequest',
        'BackupCodes',
        'PermissionCheckRequest',
        'PermissionCheck',
      ]),
    )
  })

  it("types Problem.code as the catalogue's codes", () => {
    const problem = document.components.schemas.Problem
    expect(problem?.properties?.code?.enum?.sort()).toEqual(Object.keys(ErrorCatalogue).sort())
    expect(problem?.properties?.errors).toBeDefined()
  })

  it('describes every response, and makes optional parameters optional', () => {
    const undescribed = operations().flatMap(({ name, operation }) =>
      Object.entries(operation.responses)
        .filter(([, response]) => !response.description || response.description === 'Default Response')
        .map(([status]) => `${name} ${status}`),
    )
    expect(undescribed).toEqual([])
    const list = document.paths['/api/purchase-requests']?.get
    expect(list?.parameters?.find((p) => p.name === 'limit')?.required ?? false).toBe(false)
  })

  it('documents the Set-Cookie of login and refresh, and says public operations need no security', () => {
    for (const route of ['/api/auth/login', '/api/auth/refresh']) {
      expect(document.paths[route]?.post?.responses['200']?.headers).toHaveProperty('Set-Cookie')
      expect(document.paths[route]?.post?.security).toEqual([])
    }
  })
})

describe('what a browser sends', () => {
  it('answers CORS preflights of public and protected routes without asking for credentials', async () => {
    for (const url of ['/api/auth/login', '/api/auth/sessions', '/api/storage/files']) {
      const res = await t.app.inject({
        method: 'OPTIONS',
        url,
        headers: { origin: ORIGIN, 'access-control-request-method': 'POST' },
      })
      expect(res.statusCode, url).toBe(204)
      expect(res.headers['access-control-allow-origin']).toBe(ORIGIN)
    }
  })

  it('accepts a body-less POST sent with a JSON content type on routes that take no body', async () => {
    const session = await signIn(t.app, await newUser(t.app))
    const setup = await t.app.inject({
      method: 'POST',
      url: '/api/auth/otp/setup',
      headers: { 'content-type': 'application/json' },
      cookies: { access_token: session.access },
    })
    expect(setup.statusCode, setup.body).toBe(200)
    const logout = await t.app.inject({
      method: 'POST',
      url: '/api/auth/logout',
      headers: { 'content-type': 'application/json; charset=utf-8' },
      cookies: { refresh_token: session.refresh },
    })
    expect(logout.statusCode, logout.body).toBe(204)
  })
})
