import { randomUUID } from 'node:crypto'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { FAST_LOGIN_CONFIG, newActor, type Session } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Request bodies are validated as sent, never coerced: a number, a boolean or
// null where the document says string, or a missing required field, is 400 VALIDATION_FAILED with
// the field in `errors[]`, and nothing is stored. Path and query values, which travel as text,
// are still coerced to their declared types.

const t = useTestApp({ config: FAST_LOGIN_CONFIG })

interface BodyRoute {
  family: string
  method: 'POST' | 'PUT'
  path: string
  url: () => string
  /** A valid body; each of its fields is broken in turn. */
  body: () => Record<string, unknown>
  required: string[]
}

let admin: Session
let organizationId = ''

beforeAll(async () => {
  const actor = await newActor(t.app, { role: 'admin' })
  admin = actor.session
  organizationId = actor.user.organizationId
})

const ROUTES: BodyRoute[] = [
  {
    family: 'authentication',
    method: 'POST',
    path: '/api/auth/login',
    url: () => '/api/auth/login',
    body: () => ({ username: 'someone@example.com', password: 'a password', otpCode: '123456' }),
    required: ['username', 'password'],
  },
  {
    family: 'authentication',
    method: 'POST',
    path: '/api/auth/password-reset/request',
    url: () => '/api/auth/password-reset/request',
    body: () => ({ email: 'someone@example.com' }),
    required: ['email'],
  },
  {
    family: 'authentication',
    method: 'POST',
    path: '/api/auth/password-reset/confirm',
    url: () => '/api/auth/password-reset/confirm',
    body: () => ({ token: 'a-token', newPassword: 'a long enough passphrase' }),
    required: ['token', 'newPassword'],
  },
  {
    family: 'service accounts',
    method: 'POST',
    path: '/api/auth/service-token',
    url: () => '/api/auth/service-token',
    body: () => ({ clientId: 'backend', clientSecret: 'secret' }),
    required: ['clientId', 'clientSecret'],
  },
  {
    family: 'two-factor',
    method: 'POST',
    path: '/api/auth/otp/enable',
    url: () => '/api/auth/otp/enable',
    body: () => ({ code: '123456' }),
    required: ['code'],
  },
  {
    family: 'users',
    method: 'POST',
    path: '/api/users',
    url: () => '/api/users',
    body: () => ({ email: `invitee-${randomUUID()}@example.com`, organizationId, role: 'member' }),
    required: ['email', 'organizationId'],
  },
  {
    family: 'authorization',
    method: 'POST',
    path: '/api/authz/check',
    url: () => '/api/authz/check',
    body: () => ({ relation: 'can_view', objectType: 'purchase_request', objectId: randomUUID() }),
    required: ['relation', 'objectType', 'objectId'],
  },
  {
    family: 'configuration',
    method: 'PUT',
    path: '/api/organizations/{orgId}/config/some.key',
    url: () => `/api/organizations/${organizationId}/config/some.key`,
    body: () => ({ value: 'a value' }),
    required: ['value'],
  },
  {
    family: 'purchase requests',
    method: 'POST',
    path: '/api/purchase-requests',
    url: () => '/api/purchase-requests',
    body: () => ({ title: 'Laptops' }),
    required: ['title'],
  },
  {
    family: 'files',
    method: 'POST',
    path: '/api/storage/files',
    url: () => '/api/storage/files',
    body: () => ({
      resourceType: 'purchase_request',
      resourceId: randomUUID(),
      fileName: 'quote.pdf',
      contentType: 'application/pdf',
    }),
    required: ['resourceType', 'resourceId', 'fileName', 'contentType'],
  },
]

const TABLES = [
  'accounts',
  'sessions',
  'one_time_tokens',
  'mail_outbox',
  'authz_outbox',
  'organization_config',
  'purchase_requests',
  'files',
] as const

async function rowCounts(): Promise<Record<string, number>> {
  const counts: Record<string, number> = {}
  for (const table of TABLES) {
    const { rows } = await sql<{ n: string }>`select count(*) as n from ${sql.table(table)}`.execute(t.app.db)
    counts[table] = Number(rows[0]?.n)
  }
  return counts
}

/** The wrong-typed stand-ins for a string field: what coercion used to turn into text. */
const WRONG_TYPES: unknown[] = [12345, true, ['an', 'array'], { an: 'object' }]

describe('request bodies are validated as sent', () => {
  for (const route of ROUTES) {
    it(`refuses wrong-typed, null, missing and unknown fields (${route.family}: ${route.method} ${route.path})`, async () => {
      const before = await rowCounts()
      for (const field of Object.keys(route.body())) {
        const cases: [string, Record<string, unknown>][] = [
          ...WRONG_TYPES.map((value): [string, Record<string, unknown>] => [
            JSON.stringify(value),
            { ...route.body(), [field]: value },
          ]),
          ['null', { ...route.body(), [field]: null }],
        ]
        if (route.required.includes(field)) {
          const { [field]: _removed, ...rest } = route.body()
          cases.push(['missing', rest])
        }
        for (const [name, payload] of cases) {
          const res = await t.app.inject({
            method: route.method,
            url: route.url(),
            cookies: { access_token: admin.access },
            payload,
          })
          expect({ field, case: name, status: res.statusCode, code: res.json().code }).toEqual({
            field,
            case: name,
            status: 400,
            code: 'VALIDATION_FAILED',
          })
          expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(`body.${field}`)
        }
      }
      const extra = await t.app.inject({
        method: route.method,
        url: route.url(),
        cookies: { access_token: admin.access },
        payload: { ...route.body(), unexpected: 'field' },
      })
      expect(extra.statusCode).toBe(400)
      expect(extra.json().errors).toEqual([
        { path: 'body.unexpected', message: 'is not an allowed property' },
      ])
      expect(await rowCounts()).toEqual(before)
    })
  }

  it('stores a title sent as text exactly, and refuses one sent as a number', async () => {
    const stored = await t.app.inject({
      method: 'POST',
      url: '/api/purchase-requests',
      cookies: { access_token: admin.access },
      payload: { title: '12345' },
    })
    expect(stored.statusCode).toBe(201)
    expect(stored.json().title).toBe('12345')
  })

  it('still reads typed query values from their text (limit=2 is the number 2)', async () => {
    const res = await t.app.inject({
      method: 'GET',
      url: '/api/purchase-requests?limit=2',
      cookies: { access_token: admin.access },
    })
    expect(res.statusCode).toBe(200)
    const wrong = await t.app.inject({
      method: 'GET',
      url: '/api/purchase-requests?limit=two',
      cookies: { access_token: admin.access },
    })
    expect(wrong.json().code).toBe('VALIDATION_FAILED')
  })
})
