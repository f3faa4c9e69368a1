import { randomUUID } from 'node:crypto'
import net from 'node:net'
import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { AppError } from '../src/errors.ts'
import { userAccessToken } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

const t = useTestApp({
  configure: (app) => {
    const typed = app.withTypeProvider<TypeBoxTypeProvider>()
    // Test routes are public by config: the guard closes every route that does not say so.
    const open = { config: { public: true } }
    typed.post(
      '/test/echo',
      {
        ...open,
        schema: {
          body: Type.Object(
            { title: Type.String({ minLength: 1, maxLength: 5 }), count: Type.Integer() },
            { additionalProperties: false },
          ),
          response: { 200: Type.Object({ title: Type.String() }) },
        },
      },
      async (request) => ({ title: request.body.title }),
    )
    typed.get('/test/conflict', open, async () => {
      throw new AppError('INVALID_TRANSITION', 'Cannot approve a DRAFT request')
    })
    typed.get('/test/otp', open, async () => {
      throw new AppError('INVALID_OTP', undefined, { status: 400 })
    })
    typed.get('/test/crash', open, async () => {
      throw new Error('relation "secret_table" does not exist: select password_hash from accounts')
    })
    typed.post('/test/store', open, async (request) => {
      const { value } = request.body as { value: string }
      await sql`select ${value}::text as v`.execute(app.db)
      return {}
    })
    typed.get('/test/db-down', open, async () => {
      throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })
    })
    // A route a browser navigates to: its refusals send a person to a page named by the code.
    const failures: Record<string, () => Error> = {
      refused: () => new AppError('ACCESS_DENIED', 'Not for you, and this detail stays out of the address'),
      unreachable: () => new AppError('SERVICE_UNAVAILABLE', 'The provider cannot be reached'),
      crash: () => new Error('relation "secret_table" does not exist'),
      'db-down': () =>
        Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
    }
    typed.get(
      '/test/navigated/:failure',
      {
        config: {
          public: true,
          navigationRefusal: (_request, code) => `https://app.example.test/?failed=${code}`,
        },
        schema: { params: Type.Object({ failure: Type.String({ maxLength: 12 }) }) },
      },
      async (request) => {
        throw (failures[request.params.failure] ?? failures.crash)?.()
      },
    )
  },
})

describe('error responses', () => {
  it('renders a thrown AppError as problem+json with its code', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/test/conflict' })
    expect(res.statusCode).toBe(409)
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(res.json()).toEqual({
      type: 'urn:problem:invalid-transition',
      title: 'Invalid transition',
      status: 409,
      detail: 'Cannot approve a DRAFT request',
      code: 'INVALID_TRANSITION',
    })
  })

  it('lets one code answer with its alternative documented status', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/test/otp' })
    expect(res.statusCode).toBe(400)
    expect(res.json()).toMatchObject({ code: 'INVALID_OTP', status: 400 })
  })

  it('answers an unknown route with 404 NOT_FOUND to a signed-in caller', async () => {
    const res = await t.app.inject({
      method: 'GET',
      url: '/nothing-here?token=abc',
      cookies: { access_token: userAccessToken(t.app, randomUUID()) },
    })
    expect(res.statusCode).toBe(404)
    expect(res.json()).toMatchObject({ code: 'NOT_FOUND', detail: 'No route for GET /nothing-here' })
  })

  it('answers an unknown route with 401 to an unauthenticated caller, hiding the route map', async () => {
    for (const url of ['/api/nothing-here', '/nothing-here']) {
      const res = await t.app.inject({ method: 'GET', url })
      expect(res.statusCode).toBe(401)
      expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
    }
  })

  it('answers invalid input with 400 VALIDATION_FAILED and the paths at fault', async () => {
    const missing = await t.app.inject({ method: 'POST', url: '/test/echo', payload: { count: 1 } })
    expect(missing.statusCode).toBe(400)
    expect(missing.json()).toMatchObject({
      code: 'VALIDATION_FAILED',
      errors: [{ path: 'body.title', message: 'is required' }],
    })
    const tooLong = await t.app.inject({
      method: 'POST',
      url: '/test/echo',
      payload: { title: 'abcdefgh', count: 1 },
    })
    expect(tooLong.json().errors).toEqual([{ path: 'body.title', message: expect.stringContaining('5') }])
    const extra = await t.app.inject({
      method: 'POST',
      url: '/test/echo',
      payload: { title: 'a', count: 1, admin: true },
    })
    expect(extra.statusCode).toBe(400)
    expect(extra.json().errors).toEqual([{ path: 'body.admin', message: 'is not an allowed property' }])
  })

  it('answers malformed JSON with 400 MALFORMED_JSON', async () => {
    for (const payload of ['{"title": ', '', '{"__proto__": {"x": 1}}']) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/test/echo',
        headers: { 'content-type': 'application/json' },
        payload,
      })
      expect(res.statusCode).toBe(400)
      expect(res.json().code).toBe('MALFORMED_JSON')
    }
  })

  it('answers a body over the limit with 413 PAYLOAD_TOO_LARGE', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/test/echo',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ title: 'x'.repeat(2 * 1024 * 1024), count: 1 }),
    })
    expect(res.statusCode).toBe(413)
    expect(res.json().code).toBe('PAYLOAD_TOO_LARGE')
  })

  it('refuses non-JSON bodies with 415 so cross-site simple requests cannot reach a route', async () => {
    for (const contentType of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
    ]) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/test/echo',
        headers: { 'content-type': contentType },
        payload: 'title=a&count=1',
      })
      expect(res.statusCode).toBe(415)
      expect(res.json().code).toBe('UNSUPPORTED_MEDIA_TYPE')
    }
  })

  it('hides the message, stack and SQL of an unexpected error behind 500 INTERNAL_ERROR', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/test/crash' })
    expect(res.statusCode).toBe(500)
    expect(res.json()).toEqual({
      type: 'urn:problem:internal-error',
      title: 'Internal error',
      status: 500,
      detail: 'An unexpected error occurred',
      code: 'INTERNAL_ERROR',
    })
    expect(res.body).not.toMatch(/secret_table|password_hash|at .*\.ts/)
    const logged = t.logs.records().find((r) => r.msg === 'request failed')
    expect(logged?.requestId).toBe(res.headers['x-request-id'])
  })

  it('answers a value the database cannot store (a NUL character) with 400 VALIDATION_FAILED, not 500', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/test/store', payload: { value: 'a\u0000b' } })
    expect(res.statusCode).toBe(400)
    expect(res.json()).toMatchObject({
      code: 'VALIDATION_FAILED',
      errors: [{ path: 'request', message: 'contains a value that cannot be stored' }],
    })
    expect(res.body).not.toMatch(/0x00|UTF8|select/)
  })

  it('answers an unreachable database with 503 SERVICE_UNAVAILABLE', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/test/db-down' })
    expect(res.statusCode).toBe(503)
    expect(res.json().code).toBe('SERVICE_UNAVAILABLE')
    expect(res.headers['retry-after']).toBe('5')
    expect(res.body).not.toContain('5432')
  })

  describe('on a route that names where refused navigations go', () => {
    const navigation = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' }
    const get = (url: string, headers: Record<string, string> = navigation) =>
      t.app.inject({ method: 'GET', url, headers })

    it("sends a browser's refused navigation there (302, no-store) with the code alone", async () => {
      for (const [url, code] of [
        ['/test/navigated/refused', 'ACCESS_DENIED'],
        ['/test/navigated/unreachable', 'SERVICE_UNAVAILABLE'],
        ['/test/navigated/far-too-long-to-be-valid', 'VALIDATION_FAILED'],
      ] as const) {
        const res = await get(url)
        expect({ status: res.statusCode, location: res.headers.location }).toEqual({
          status: 302,
          location: `https://app.example.test/?failed=${code}`,
        })
        expect(res.headers['cache-control']).toBe('no-store')
        expect(res.body).toBe('')
      }
    })

    it('answers a program (JSON preferred, or no Accept) with problem+json as anywhere', async () => {
      const programs: Record<string, string>[] = [
        { accept: 'application/json' },
        { accept: 'application/json, text/html' },
        {},
      ]
      for (const headers of programs) {
        const res = await get('/test/navigated/refused', headers)
        expect(res.statusCode).toBe(403)
        expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
        expect(res.json().code).toBe('ACCESS_DENIED')
      }
    })

    it('leaves an unexpected failure to the generic answer, also for a browser (500, an outage)', async () => {
      const crash = await get('/test/navigated/crash')
      expect(crash.statusCode).toBe(500)
      expect(crash.json().code).toBe('INTERNAL_ERROR')
      const down = await get('/test/navigated/db-down')
      expect(down.statusCode).toBe(503)
      expect(down.headers['retry-after']).toBe('5')
      expect(down.headers['content-type']).toMatch(/^application\/problem\+json/)
    })
  })

  it('echoes a well-formed request id and replaces a malformed one', async () => {
    const kept = await t.app.inject({
      method: 'GET',
      url: '/health/live',
      headers: { 'x-request-id': 'abc-123' },
    })
    expect(kept.headers['x-request-id']).toBe('abc-123')
    const replaced = await t.app.inject({
      method: 'GET',
      url: '/health/live',
      headers: { 'x-request-id': 'bad id\nwith newline' },
    })
    expect(replaced.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/)
  })
})

describe("the framework's own errors", () => {
  const signedIn = () => ({ access_token: userAccessToken(t.app, randomUUID()) })

  it('answers a path that is not valid percent-encoding with 400 BAD_REQUEST as problem+json', async () => {
    for (const url of ['/api/purchase-requests/%zz', '/%zz']) {
      const res = await t.app.inject({ method: 'GET', url, cookies: signedIn() })
      expect(res.statusCode).toBe(400)
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
      expect(res.json()).toMatchObject({ code: 'BAD_REQUEST', status: 400 })
    }
  })

  it('answers a path parameter over the router limit with 414 URI_TOO_LONG as problem+json', async () => {
    const res = await t.app.inject({ method: 'GET', url: `/api/purchase-requests/${'a'.repeat(500)}` })
    expect(res.statusCode).toBe(414)
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(res.json()).toMatchObject({ code: 'URI_TOO_LONG', status: 414 })
  })

  /** Sends raw bytes to a listening copy of the app and returns what came back. */
  async function raw(request: string): Promise<string> {
    if (!t.app.server.listening) await t.app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = t.app.server.address() as net.AddressInfo
    return new Promise((resolve, reject) => {
      const socket = net.connect(Number(port), '127.0.0.1', () => socket.end(request))
      let answer = ''
      socket.setEncoding('utf8')
      socket.on('data', (chunk: string) => {
        answer += chunk
      })
      socket.on('close', () => resolve(answer))
      socket.on('error', reject)
    })
  }

  it('answers a request the HTTP parser refuses with a problem+json 400 or 431', async () => {
    const malformed = await raw('GET /health/live HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n')
    expect(malformed).toMatch(/^HTTP\/1\.1 400 /)
    expect(malformed).toContain('Content-Type: application/problem+json')
    expect(JSON.parse(malformed.slice(malformed.indexOf('\r\n\r\n') + 4))).toMatchObject({
      code: 'BAD_REQUEST',
    })

    const huge = await raw(`GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`)
    expect(huge).toMatch(/^HTTP\/1\.1 431 /)
    expect(JSON.parse(huge.slice(huge.indexOf('\r\n\r\n') + 4))).toMatchObject({ code: 'HEADERS_TOO_LARGE' })
  })
})
