import { randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { createPermissions } from '../src/authz/permissions.ts'
import { type AuthorizationPort, AuthorizationUnavailableError } from '../src/authz/port.ts'
import { isDataException } from '../src/db/database.ts'
import { AppError } from '../src/errors.ts'
import { PurchaseRequestCursor } from '../src/features/purchase-requests/repository.ts'
import type { UserPrincipal } from '../src/principal.ts'
import { SCOPES } from '../src/scopes.ts'
import { type Actor, FAST_LOGIN_CONFIG, newActor } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { ownedResource } from './helpers/files.ts'
import { newDeliveredApiKey, type TestApiKey } from './helpers/machines.ts'

// A value PostgreSQL refuses as data (SQLSTATE class 22: a NUL character in text, a timestamp out
// of range) is the caller's mistake: 400 VALIDATION_FAILED, never 503 "the authorization server is
// unavailable" nor 500, and never logged as an outage. Checked at the edge where the schema can say
// it, and by the error handler and the authorization path for whatever still reaches the database.

/** The error the database under test raises for a NUL character in text (22021 on both drivers). */
let nulError: unknown

/** An authorization port whose every answer fails with `error`, as one backed by the database would. */
const failingPort = (error: () => unknown): AuthorizationPort => ({
  check: async () => {
    throw error()
  },
  write: async () => {},
  ready: async () => {},
  close: async () => {},
})

const principal: UserPrincipal = {
  type: 'USER',
  id: randomUUID(),
  userId: randomUUID(),
  organizationId: randomUUID(),
  sessionId: randomUUID(),
}

const t = useTestApp({
  config: FAST_LOGIN_CONFIG,
  configure: (app) => {
    const open = { config: { public: true } }
    // A check through a port that fails with the database's data error, as its cause or as it is.
    app.get('/test/authz-refused-value', open, async () => {
      const permissions = createPermissions(
        failingPort(() => new AuthorizationUnavailableError('cannot answer', { cause: nulError })),
        app.log,
      )
      return { allowed: await permissions.check(principal, 'member', 'organization:x') }
    })
    // A layer that turns every failure into an outage, as the refresh of a session does.
    app.get('/test/outage-wrapping-refused-value', open, async () => {
      throw new AppError('SERVICE_UNAVAILABLE', 'The session could not be refreshed; retry', {
        cause: nulError,
      })
    })
    app.get('/test/client-error-with-refused-cause', open, async () => {
      throw new AppError('NOT_FOUND', 'No such thing', { cause: nulError })
    })
  },
})

/** A cursor of the purchase-request list as it writes them, at any time a Date holds. */
const cursorOf = (createdAt: string, id = '00000000-0000-0000-0000-000000000000') =>
  PurchaseRequestCursor.encode({ createdAt: new Date(createdAt), id })

function expectRefused(res: LightMyRequestResponse, path?: string): void {
  expect({ status: res.statusCode, code: res.json().code }).toEqual({
    status: 400,
    code: 'VALIDATION_FAILED',
  })
  if (path) expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path)
  expect(res.body).not.toMatch(/invalid byte sequence|out of range|0x00|select |authorization server/i)
}

function expectNoOutageLogged(): void {
  const outages = t.logs.records().filter((r) => Number(r.level) >= 50)
  expect(outages.map((r) => `${r.msg}: ${JSON.stringify(r.err ?? {}).slice(0, 200)}`)).toEqual([])
}

describe('values the database refuses as data', () => {
  let admin: Actor
  let key: TestApiKey
  let resourceId: string

  beforeAll(async () => {
    nulError = await sql`select ${'a\u0000b'}::text as v`.execute(t.app.db).then(
      () => new Error('the database stored a NUL character'),
      (error: unknown) => error,
    )
    admin = await newActor(t.app, { role: 'admin' })
    key = await newDeliveredApiKey(t.app, admin.user.organizationId, [...SCOPES])
    resourceId = await ownedResource(t.app, admin.user.organizationId)
  })

  describe('POST /api/authz/check', () => {
    for (const objectId of ['a\u0000b', '\u0000', 'a\u0001b', 'a\u001fb', 'a\u007fb']) {
      it(`answers 400 VALIDATION_FAILED for the object id ${JSON.stringify(objectId)}, to a user and to an API key`, async () => {
        const payload = { relation: 'can_view', objectType: 'purchase_request', objectId }
        const asUser = await t.app.inject({
          method: 'POST',
          url: '/api/authz/check',
          cookies: { access_token: admin.session.access },
          payload,
        })
        expectRefused(asUser, 'body.objectId')
        const asKey = await t.app.inject({
          method: 'POST',
          url: '/api/authz/check',
          headers: key.headers,
          payload,
        })
        expectRefused(asKey, 'body.objectId')
        expectNoOutageLogged()
      })
    }

    it('still answers an object id of printable characters', async () => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/api/authz/check',
        cookies: { access_token: admin.session.access },
        payload: { relation: 'can_view', objectType: 'purchase_request', objectId: resourceId },
      })
      expect(res.statusCode).toBe(200)
      expect(res.json()).toEqual({ allowed: true })
    })
  })

  describe('GET /api/purchase-requests', () => {
    // Well-formed cursors whose time a Date holds and PostgreSQL (or PGlite) does not.
    for (const createdAt of [
      '-271821-04-20T00:00:00.000Z',
      '-004713-11-23T00:00:00.000Z',
      '0000-01-01T00:00:00.000Z',
      '+010000-01-01T00:00:00.000Z',
      '+275760-09-13T00:00:00.000Z',
    ]) {
      it(`answers 400 VALIDATION_FAILED for a cursor at ${createdAt}, with or without a status`, async () => {
        for (const query of [`cursor=${cursorOf(createdAt)}`, `status=DRAFT&cursor=${cursorOf(createdAt)}`]) {
          const asUser = await t.app.inject({
            method: 'GET',
            url: `/api/purchase-requests?${query}`,
            cookies: { access_token: admin.session.access },
          })
          expectRefused(asUser, 'querystring.cursor')
          const asKey = await t.app.inject({
            method: 'GET',
            url: `/api/purchase-requests?${query}`,
            headers: key.headers,
          })
          expectRefused(asKey, 'querystring.cursor')
        }
        expectNoOutageLogged()
      })
    }

    // Ajv coerces these to a number that is not finite, which its minimum and maximum do not compare.
    for (const limit of ['Infinity', '-Infinity', '1e309', '-1e999']) {
      it(`answers 400 VALIDATION_FAILED for limit=${limit}, with or without a status`, async () => {
        for (const query of [`limit=${limit}`, `status=DRAFT&limit=${limit}`]) {
          const asUser = await t.app.inject({
            method: 'GET',
            url: `/api/purchase-requests?${query}`,
            cookies: { access_token: admin.session.access },
          })
          expectRefused(asUser, 'querystring.limit')
          expect(asUser.json().errors).toEqual([
            { path: 'querystring.limit', message: 'must be a finite number' },
          ])
          const asKey = await t.app.inject({
            method: 'GET',
            url: `/api/purchase-requests?${query}`,
            headers: key.headers,
          })
          expectRefused(asKey, 'querystring.limit')
        }
        expectNoOutageLogged()
      })
    }

    it('still coerces a finite limit, and refuses one out of its range as before', async () => {
      const ok = await t.app.inject({
        method: 'GET',
        url: '/api/purchase-requests?limit=1e1',
        cookies: { access_token: admin.session.access },
      })
      expect(ok.statusCode).toBe(200)
      for (const limit of ['1e308', '9223372036854775808', '0', '-0', '1.5', 'NaN']) {
        const res = await t.app.inject({
          method: 'GET',
          url: `/api/purchase-requests?limit=${limit}`,
          cookies: { access_token: admin.session.access },
        })
        expectRefused(res, 'querystring.limit')
      }
    })

    it('answers 400 VALIDATION_FAILED for a cursor with control characters', async () => {
      const res = await t.app.inject({
        method: 'GET',
        url: `/api/purchase-requests?cursor=${encodeURIComponent(`${cursorOf('2026-01-01T00:00:00.000Z')}\u0000`)}`,
        cookies: { access_token: admin.session.access },
      })
      expectRefused(res, 'querystring.cursor')
    })

    it('still pages with the cursors it writes, at the edges of the years it accepts', async () => {
      for (const createdAt of ['0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z']) {
        const res = await t.app.inject({
          method: 'GET',
          url: `/api/purchase-requests?cursor=${cursorOf(createdAt)}`,
          cookies: { access_token: admin.session.access },
        })
        expect(res.statusCode).toBe(200)
      }
    })
  })

  describe('text looked up in the database, refused at the edge', () => {
    const cases: [string, string, (value: string) => Record<string, unknown>, string][] = [
      ['POST', '/api/auth/login', (v) => ({ username: v, password: 'x' }), 'body.username'],
      ['POST', '/api/auth/service-token', (v) => ({ clientId: v, clientSecret: 'x' }), 'body.clientId'],
      ['POST', '/api/auth/password-reset/request', (v) => ({ email: v }), 'body.email'],
    ]
    for (const [method, url, body, path] of cases) {
      it(`${method} ${url} answers 400 VALIDATION_FAILED at ${path} for NUL and other controls`, async () => {
        for (const value of ['a\u0000b@example.com', 'a\u0001b@example.com', '\u001b[31m@example.com']) {
          const res = await t.app.inject({ method: method as 'POST', url, payload: body(value) })
          expectRefused(res, path)
        }
      })
    }

    it('POST /api/users answers 400 VALIDATION_FAILED at body.email for NUL and other controls', async () => {
      for (const email of ['a\u0000b@example.com', 'a\u0001b@example.com']) {
        const res = await t.app.inject({
          method: 'POST',
          url: '/api/users',
          cookies: { access_token: admin.session.access },
          payload: { email, organizationId: admin.user.organizationId },
        })
        expectRefused(res, 'body.email')
      }
    })
  })

  describe('the authorization path and the error handler', () => {
    it('gets a class 22 error with its SQLSTATE from the database under test', () => {
      expect((nulError as { code?: string }).code).toBe('22021')
      expect(isDataException(nulError)).toBe(true)
      expect(isDataException(new AuthorizationUnavailableError('wrapped', { cause: nulError }))).toBe(true)
      expect(isDataException(Object.assign(new Error('refused'), { code: '22021' }))).toBe(false)
      expect(isDataException(Object.assign(new Error('down'), { code: 'ECONNREFUSED' }))).toBe(false)
    })

    it('passes a data error of the embedded evaluator up as it is, not as "cannot answer"', async () => {
      const failure = await t.app.authz.port
        .check({ user: `user:${randomUUID()}`, relation: 'can_view', object: 'purchase_request:a\u0000b' })
        .then(
          () => null,
          (error: unknown) => error,
        )
      expect(failure).not.toBeInstanceOf(AuthorizationUnavailableError)
      expect(isDataException(failure)).toBe(true)
    })

    it('does not turn a data error wrapped by the port into 503, nor log it as an outage', async () => {
      const errors: object[] = []
      const permissions = createPermissions(
        failingPort(() => new AuthorizationUnavailableError('cannot answer', { cause: nulError })),
        { error: (fields) => errors.push(fields) },
      )
      const failure = await permissions.check(principal, 'member', 'organization:x').then(
        () => null,
        (error: unknown) => error,
      )
      expect(failure).not.toBeInstanceOf(AppError)
      expect(isDataException(failure)).toBe(true)
      expect(errors).toEqual([])
    })

    it('still answers 503 when the port cannot answer for another reason', async () => {
      const errors: object[] = []
      const permissions = createPermissions(
        failingPort(() => new AuthorizationUnavailableError('connect ECONNREFUSED')),
        { error: (fields) => errors.push(fields) },
      )
      await expect(permissions.check(principal, 'member', 'organization:x')).rejects.toMatchObject({
        code: 'SERVICE_UNAVAILABLE',
        status: 503,
      })
      expect(errors).toHaveLength(1)
    })

    it('renders a data error from the authorization path as 400, not 503', async () => {
      const res = await t.app.inject({ method: 'GET', url: '/test/authz-refused-value' })
      expectRefused(res, 'request')
      expectNoOutageLogged()
    })

    it('renders an outage whose cause is a data error as 400', async () => {
      const res = await t.app.inject({ method: 'GET', url: '/test/outage-wrapping-refused-value' })
      expectRefused(res, 'request')
      expect(res.headers['retry-after']).toBeUndefined()
      expectNoOutageLogged()
    })

    it('keeps a deliberate client error whose cause is a data error', async () => {
      const res = await t.app.inject({ method: 'GET', url: '/test/client-error-with-refused-cause' })
      expect({ status: res.statusCode, code: res.json().code }).toEqual({ status: 404, code: 'NOT_FOUND' })
    })
  })
})
