import { validate } from '@readme/openapi-parser'
import { describe, expect, it } from 'vitest'
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
      const res = await current.app.inject({ method: 'GET', url })
      expect(res.statusCode).toBe(404)
      expect(res.json().code).toBe('NOT_FOUND')
    }
  })
})
