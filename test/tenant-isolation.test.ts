import { Readable } from 'node:stream'
import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { LightMyRequestResponse } from 'fastify'
import { beforeAll, describe, expect, it } from 'vitest'
import { currentTenant } from '../src/context.ts'
import { FAST_LOGIN_CONFIG, type OrganizationSession, signInNewUser } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Style convention 4: domain code reads the organization from the request context. A test route
// reads it inside its handler, after awaits, for requests with a JSON body, while other
// organizations' requests are suspended in the same process.

const TENANT_ROUTE = '/api/test/tenant'

interface Barrier {
  expected: number
  waiting: (() => void)[]
  full: PromiseWithResolvers<void>
}

/** When armed, holds every handler until `expected` of them are suspended at once. */
let barrier: Barrier | null = null

async function holdAtBarrier(): Promise<void> {
  const current = barrier
  if (!current) return
  const { promise, resolve } = Promise.withResolvers<void>()
  current.waiting.push(resolve)
  if (current.waiting.length === current.expected) current.full.resolve()
  await promise
}

const t = useTestApp({
  config: FAST_LOGIN_CONFIG,
  configure: (app) => {
    app.withTypeProvider<TypeBoxTypeProvider>().post(
      TENANT_ROUTE,
      {
        schema: {
          body: Type.Object({ marker: Type.String() }, { additionalProperties: false }),
          response: {
            200: Type.Object({
              marker: Type.String(),
              organizationId: Type.Union([Type.String(), Type.Null()]),
            }),
          },
        },
      },
      async (request) => {
        // Read only after real asynchronous work: a database round trip, then a wait for the others.
        await app.db.selectFrom('organizations').select('id').limit(1).execute()
        await holdAtBarrier()
        return { marker: request.body.marker, organizationId: currentTenant() }
      },
    )
  },
})

type Login = OrganizationSession

const newUserSession = () => signInNewUser(t.app)

/**
 * Sends the JSON body only when the server starts reading it, from the test's own async context, as
 * data from a socket would arrive: the handler then runs in the body parser's context, not onRequest's.
 */
function postTenant(access: string | undefined, marker: string): Promise<LightMyRequestResponse> {
  const readStarted = Promise.withResolvers<void>()
  const body = new Readable({ read: () => readStarted.resolve() })
  void readStarted.promise.then(() => {
    body.push(JSON.stringify({ marker }))
    body.push(null)
  })
  return t.app.inject({
    method: 'POST',
    url: TENANT_ROUTE,
    headers: { 'content-type': 'application/json' },
    payload: body,
    ...(access ? { cookies: { access_token: access } } : {}),
  })
}

describe('tenant context', () => {
  let alice: Login
  let bob: Login

  beforeAll(async () => {
    alice = await newUserSession()
    bob = await newUserSession()
    expect(alice.organizationId).not.toBe(bob.organizationId)
  })

  it("gives a handler of a JSON request its caller's organization after an await", async () => {
    const res = await postTenant(alice.access, 'single')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ marker: 'single', organizationId: alice.organizationId })
  })

  it('keeps the organizations of interleaved parallel requests apart', async () => {
    const count = 20
    barrier = { expected: count, waiting: [], full: Promise.withResolvers<void>() }
    try {
      const callers = Array.from({ length: count }, (_, i) => (i % 2 === 0 ? alice : bob))
      const pending = callers.map((caller, i) => postTenant(caller.access, `request-${i}`))
      // Every handler is suspended at once; resume them in reverse order of arrival.
      await barrier.full.promise
      for (const resume of barrier.waiting.toReversed()) resume()
      const responses = await Promise.all(pending)

      responses.forEach((res, i) => {
        expect(res.statusCode).toBe(200)
        expect(res.json()).toEqual({ marker: `request-${i}`, organizationId: callers[i]?.organizationId })
      })
    } finally {
      barrier = null
    }
  })

  it('refuses an unauthenticated request to a protected route with 401 AUTHENTICATION_REQUIRED', async () => {
    const res = await postTenant(undefined, 'anonymous')
    expect(res.statusCode).toBe(401)
    expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
  })

  it('treats a forged access cookie as no credentials', async () => {
    const res = await postTenant(`${alice.access.slice(0, -4)}AAAA`, 'forged')
    expect(res.statusCode).toBe(401)
    expect(res.json().code).toBe('AUTHENTICATION_REQUIRED')
  })
})

describe("another organization's sessions", () => {
  it('are not listed for, and cannot be revoked by, a user of another organization', async () => {
    const alice = await newUserSession()
    const bob = await newUserSession()

    const list = await t.app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: alice.access },
    })
    expect(list.statusCode).toBe(200)
    expect(list.json().map((s: { sessionId: string }) => s.sessionId)).toEqual([alice.sessionId])

    const revoke = await t.app.inject({
      method: 'DELETE',
      url: `/api/auth/sessions/${bob.sessionId}`,
      cookies: { access_token: alice.access },
    })
    expect(revoke.statusCode).toBe(404)
    expect(revoke.json().code).toBe('NOT_FOUND')

    const bobList = await t.app.inject({
      method: 'GET',
      url: '/api/auth/sessions',
      cookies: { access_token: bob.access },
    })
    expect(bobList.json().map((s: { sessionId: string }) => s.sessionId)).toEqual([bob.sessionId])
    const bobRefresh = await t.app.inject({
      method: 'POST',
      url: '/api/auth/refresh',
      cookies: { refresh_token: bob.refresh },
    })
    expect(bobRefresh.statusCode).toBe(200)
  })
})
