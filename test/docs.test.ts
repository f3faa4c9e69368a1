import { randomUUID } from 'node:crypto'
import { validate } from '@readme/openapi-parser'
import { describe, expect, it } from 'vitest'
import { userAccessToken } from './helpers/accounts.ts'
import { createTestAppForTest } from './helpers/app.ts'

describe('OpenAPI document and interactive docs', () => {
  it('serves a valid OpenAPI 3.1 document at /v3/api-docs without authentication', async () => {
    const current = await createTestAppForTest()
    const res = await current.app.inject({ method: 'GET', url: '/v3/api-docs' })
    expect(res.statusCode).toBe(200)
    const document = res.json()
    expect(document.openapi).toBe('3.1.0')
    const result = await validate(structuredClone(document))
    expect(result).toMatchObject({ valid: true, warnings: [] })
    expect(document.components.securitySchemes).toEqual({
      accessCookie: { type: 'apiKey', in: 'cookie', name: 'access_token' },
      bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
      apiKey: { type: 'apiKey', in: 'header', name: 'X-Api-Key' },
      clientBasic: { type: 'http', scheme: 'basic', description: 'OAuth client_secret_basic' },
    })
    expect(document.components.schemas.Problem).toBeDefined()
    expect(
      document.paths['/health/ready'].get.responses['503'].content['application/problem+json'].schema,
    ).toEqual({
      $ref: '#/components/schemas/Problem',
    })
    expect(document.paths['/v3/api-docs']).toBeUndefined()
  })

  it('names the configured cookie and API-key header in the security schemes', async () => {
    const current = await createTestAppForTest({
      config: {
        'platform.auth.cookie.access-token-name': 'sid',
        'platform.auth.api-key.header-name': 'X-Key',
      },
    })
    const schemes = (await current.app.inject({ method: 'GET', url: '/v3/api-docs' })).json().components
      .securitySchemes
    expect(schemes.accessCookie.name).toBe('sid')
    expect(schemes.apiKey.name).toBe('X-Key')
  })

  it('serves the interactive page at /docs', async () => {
    const current = await createTestAppForTest()
    const res = await current.app.inject({ method: 'GET', url: '/docs/' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/text\/html/)
    expect(res.body).toContain('swagger-ui')
  })

  it('names a relative server, so "Try it out" calls whichever host and port served the page', async () => {
    const current = await createTestAppForTest()
    const document = (await current.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    expect(document.servers).toEqual([{ url: '/' }])
  })

  it('points the root to the interactive docs', async () => {
    const current = await createTestAppForTest()
    const res = await current.app.inject({ method: 'GET', url: '/' })
    expect(res.statusCode).toBe(302)
    expect(res.headers.location).toBe('/docs')
  })

  it('lists on every operation the problems the framework and the guard can answer', async () => {
    const current = await createTestAppForTest()
    const document = (await current.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    const missing: string[] = []
    for (const [path, item] of Object.entries<
      Record<string, { responses: Record<string, unknown>; security?: unknown[]; tags?: string[] }>
    >(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        // The OAuth 2.0 endpoints answer RFC 6749's error object instead, and authenticate in the request.
        if (operation.tags?.includes('oauth2')) {
          for (const status of ['400', '500', ...(method === 'post' ? ['401', '413'] : [])]) {
            const response = operation.responses[status] as { content?: Record<string, unknown> } | undefined
            if (!response?.content?.['application/json'])
              missing.push(`${method.toUpperCase()} ${path} ${status}`)
          }
          continue
        }
        const expected = ['400', '414', '500']
        if (['post', 'put', 'patch', 'delete'].includes(method)) expected.push('413', '415')
        if (path.startsWith('/api/')) expected.push('503')
        if (!(Array.isArray(operation.security) && operation.security.length === 0))
          expected.push('401', '403')
        for (const status of expected) {
          const response = operation.responses[status] as { content?: Record<string, unknown> } | undefined
          if (!response?.content?.['application/problem+json'])
            missing.push(`${method.toUpperCase()} ${path} ${status}`)
        }
      }
    }
    expect(missing).toEqual([])
  })

  it('documents the Location header of every 201, with its body under application/json', async () => {
    const current = await createTestAppForTest()
    const document = (await current.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    const created: string[] = []
    type Created = {
      headers?: { Location?: { schema?: unknown } }
      content?: Record<string, { schema?: unknown }>
    }
    for (const [path, item] of Object.entries<Record<string, { responses: Record<string, Created> }>>(
      document.paths,
    )) {
      for (const [method, operation] of Object.entries(item)) {
        const response = operation.responses['201']
        if (!response) continue
        created.push(`${method.toUpperCase()} ${path}`)
        expect(response.headers?.Location?.schema, path).toMatchObject({ type: 'string' })
        expect(response.content?.['application/json']?.schema, path).toBeDefined()
      }
    }
    expect(created).toEqual(
      expect.arrayContaining([
        'POST /api/purchase-requests',
        'POST /api/purchase-requests/{id}/report',
        'POST /api/storage/files',
      ]),
    )
  })

  it.each([
    [
      'the production profile',
      {
        'platform.profile': 'production',
        'platform.datasource.url': 'postgres://unused/db',
        'platform.mail.smtp.url': 'smtp://127.0.0.1:1',
        'platform.authz.openfga.api-url': 'http://127.0.0.1:1',
        'platform.authz.openfga.store-id': '01ARZ3NDEKTSV4RRFFQ69G5FAV',
        'platform.authz.openfga.model-id': '01ARZ3NDEKTSV4RRFFQ69G5FAW',
      },
    ],
    ['platform.docs.enabled=false', { 'platform.docs.enabled': 'false' }],
  ])('turns both off under %s', async (_case, config) => {
    const current = await createTestAppForTest({ config })
    for (const url of ['/v3/api-docs', '/docs', '/docs/']) {
      // No public route is there: anonymous callers meet the guard, signed-in ones find nothing.
      const anonymous = await current.app.inject({ method: 'GET', url })
      expect(anonymous.statusCode).toBe(401)
      expect(anonymous.json().code).toBe('AUTHENTICATION_REQUIRED')
      const cookies = { access_token: userAccessToken(current.app, randomUUID()) }
      const res = await current.app.inject({ method: 'GET', url, cookies })
      expect(res.statusCode).toBe(404)
      expect(res.json().code).toBe('NOT_FOUND')
    }
  })
})
