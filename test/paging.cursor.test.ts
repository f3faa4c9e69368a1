import { randomBytes, randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { beforeAll, describe, expect, it } from 'vitest'
import { cursorCodec, page, rowsToRead } from '../src/db/paging.ts'
import { AppError } from '../src/errors.ts'
import { ACCOUNT_TEST_CONFIG, type Actor, asUser, newActor, newUser } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// One paging helper and one cursor codec serve every paged list. For each list: a walk of small
// pages gives every item of the list once, in the list's order, and ends with nextCursor null; any
// cursor the list did not write (garbage, cut, edited, spelled another way, another list's) is 400
// VALIDATION_FAILED on querystring.cursor, as the document says for every list. Ties: the lists
// ordered by creation time break them by id, and the walks cross groups created at one instant;
// the others order by a unique key (email case-insensitively, the audit chain's sequence, the
// attempt's id) and their rows share one time.

const t = useTestApp({
  config: { ...ACCOUNT_TEST_CONFIG, 'platform.webhooks.allow-private-networks': 'true' },
})

interface Page {
  items: Record<string, unknown>[]
  nextCursor: string | null
}

interface List {
  operationId: string
  url: () => string
  /** Filters the walk keeps on every page. */
  query: Record<string, string>
  /** The item's identity. */
  idOf: (item: Record<string, unknown>) => string
  /** Whether `a` comes before `b` in the list's documented order. */
  before: (a: Record<string, unknown>, b: Record<string, unknown>) => boolean
  /** What the list must hold: the ids the test created. */
  created: string[]
}

let admin: Actor
let webhookId: string

const text = (value: unknown) => String(value)
/** (createdAt desc, id desc): ISO instants of one format and lower-case UUIDs compare as strings. */
const newestFirst = (a: Record<string, unknown>, b: Record<string, unknown>) =>
  text(a.createdAt) > text(b.createdAt) || (a.createdAt === b.createdAt && text(a.id) > text(b.id))

const LISTS: List[] = [
  {
    operationId: 'listPurchaseRequests',
    url: () => '/api/purchase-requests',
    query: {},
    idOf: (item) => text(item.id),
    before: newestFirst,
    created: [],
  },
  {
    operationId: 'listApiKeys',
    url: () => '/api/api-keys',
    query: {},
    idOf: (item) => text(item.id),
    before: newestFirst,
    created: [],
  },
  {
    operationId: 'listUsers',
    url: () => '/api/users',
    query: {},
    idOf: (item) => text(item.id),
    // The emails differ from their first letter on, so any collation orders them alike.
    before: (a, b) => text(a.email).toLowerCase() < text(b.email).toLowerCase(),
    created: [],
  },
  {
    operationId: 'listAuditEvents',
    url: () => '/api/audit-events',
    query: { type: 'api_key.created' },
    idOf: (item) => text(item.id),
    before: (a, b) => Number(a.sequence) > Number(b.sequence),
    created: [],
  },
  {
    operationId: 'listWebhookDeliveries',
    url: () => `/api/webhooks/${webhookId}/deliveries`,
    query: {},
    idOf: (item) => text(item.id),
    before: (a, b) => BigInt(text(a.id)) > BigInt(text(b.id)),
    created: [],
  },
]

const listNamed = (operationId: string) => LISTS.find((list) => list.operationId === operationId) as List

function get(list: List, query: Record<string, string>): Promise<LightMyRequestResponse> {
  return asUser(t.app, admin.session, { method: 'GET', url: list.url(), query: { ...list.query, ...query } })
}

async function pageOf(list: List, query: Record<string, string>): Promise<Page> {
  const res = await get(list, query)
  expect(res.statusCode, res.body).toBe(200)
  return res.json()
}

/** Every page of the list, `limit` at a time, following nextCursor to the end. */
async function walk(list: List, limit: number): Promise<Page[]> {
  const pages: Page[] = []
  let cursor: string | null = null
  do {
    pages.push(await pageOf(list, { limit: String(limit), ...(cursor === null ? {} : { cursor }) }))
    cursor = pages.at(-1)?.nextCursor ?? null
  } while (cursor !== null && pages.length <= 50)
  return pages
}

function expectInvalidCursor(res: LightMyRequestResponse, what: string): void {
  expect({ status: res.statusCode, code: res.json().code }, what).toEqual({
    status: 400,
    code: 'VALIDATION_FAILED',
  })
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
  const paths = new Set(res.json().errors.map((error: { path: string }) => error.path))
  expect([...paths], what).toEqual(['querystring.cursor'])
}

const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
const decode = (cursor: string) => JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[]

beforeAll(async () => {
  admin = await newActor(t.app, { role: 'admin' })
  const organizationId = admin.user.organizationId
  const post = async (url: string, payload: Record<string, unknown>) => {
    const res = await asUser(t.app, admin.session, { method: 'POST', url, payload })
    expect(res.statusCode, res.body).toBe(201)
    return res.json() as { id: string }
  }

  // Purchase requests and API keys: five at one instant, then three at the next second.
  for (const [operationId, create] of [
    ['listPurchaseRequests', (i: number) => post('/api/purchase-requests', { title: `Request ${i}` })],
    [
      'listApiKeys',
      (i: number) => post('/api/api-keys', { description: `Key ${i}`, scopes: ['files:read'] }),
    ],
  ] as const) {
    for (let i = 0; i < 8; i++) {
      if (i === 5) t.clock.advanceSeconds(1)
      listNamed(operationId).created.push((await create(i)).id)
    }
  }

  // Accounts at one instant, their emails in mixed case.
  const suffix = randomBytes(3).toString('hex')
  const users = listNamed('listUsers')
  users.created.push(admin.user.id)
  for (const name of ['Bravo', 'alpha', 'ECHO', 'charlie', 'Delta', 'foxtrot', 'golf']) {
    users.created.push((await newUser(t.app, { organizationId, email: `${name}-${suffix}@Example.com` })).id)
  }

  const events = await t.app.db
    .selectFrom('audit_events')
    .select('id')
    .where('organization_id', '=', organizationId)
    .where('type', '=', 'api_key.created')
    .execute()
  listNamed('listAuditEvents').created.push(...events.map((event) => event.id))

  // An endpoint whose attempts are written here: paging them needs no receiver.
  webhookId = (
    await post('/api/webhooks', { url: 'http://127.0.0.1:9/hook', eventTypes: ['webhook.deleted'] })
  ).id
  const attempts = await t.app.db
    .insertInto('webhook_attempts')
    .values(
      Array.from({ length: 7 }, (_, i) => ({
        endpoint_id: webhookId,
        organization_id: organizationId,
        message_id: `msg_${randomUUID()}`,
        event_type: 'webhook.deleted',
        attempt: i + 1,
        attempted_at: t.clock.now(),
        status_code: 500,
        duration_ms: 12,
        error: null,
        outcome: 'retrying' as const,
      })),
    )
    .returning('id')
    .execute()
  listNamed('listWebhookDeliveries').created.push(...attempts.map((attempt) => attempt.id))
})

describe.each(LISTS.map((list) => [list.operationId, list] as const))('%s', (_, list) => {
  /** The whole list in one page. */
  let whole: Record<string, unknown>[]

  beforeAll(async () => {
    const one = await pageOf(list, { limit: '100' })
    expect(one.nextCursor).toBeNull()
    whole = one.items
  })

  it('holds what was created, in its order', () => {
    expect(whole.map(list.idOf).sort()).toEqual([...list.created].sort())
    for (let i = 1; i < whole.length; i++)
      expect(list.before(whole[i - 1] as Record<string, unknown>, whole[i] as Record<string, unknown>)).toBe(
        true,
      )
  })

  it.each([1, 2, 3])(
    'walks every item once, in order, %i a page, and ends with nextCursor null',
    async (limit) => {
      const pages = await walk(list, limit)
      expect(pages.flatMap((p) => p.items.map(list.idOf))).toEqual(whole.map(list.idOf))
      expect(pages.map((p) => p.nextCursor === null)).toEqual(pages.map((_, i) => i === pages.length - 1))
      for (const p of pages.slice(0, -1)) expect(p.items).toHaveLength(limit)
    },
  )

  it('answers a page exactly full at the end with nextCursor null', async () => {
    const pages = await walk(list, whole.length)
    expect(pages).toHaveLength(1)
    expect(pages[0]?.items.map(list.idOf)).toEqual(whole.map(list.idOf))
  })

  it('answers 400 VALIDATION_FAILED on querystring.cursor for a cursor it did not write', async () => {
    const cursor = (await pageOf(list, { limit: '2' })).nextCursor as string
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/)
    const values = decode(cursor)
    const bad: string[] = [
      'garbage',
      '',
      '!!!!',
      `${cursor}=`,
      `${cursor}.`,
      cursor.slice(0, -3),
      cursor.slice(3),
      'x'.repeat(2001),
      encode(null),
      encode({}),
      encode([]),
      encode(values.slice(1)),
      encode(values.slice(0, -1)),
      encode([...values, 'more']),
      encode(['another-list', ...values.slice(1)]),
      Buffer.from(JSON.stringify(values, null, 1)).toString('base64url'),
      Buffer.from(`${JSON.stringify(values)} `).toString('base64url'),
    ]
    for (let i = 1; i < values.length; i++) {
      for (const value of [1, -1, null, true, [], {}, 'a\u0000b', '\ud800'])
        bad.push(encode(values.map((v, j) => (j === i ? value : v))))
    }
    // Another list's cursors, whatever their shape.
    for (const other of LISTS.filter((l) => l !== list)) {
      const theirs = (await pageOf(other, { limit: '2' })).nextCursor as string
      expect(theirs).toEqual(expect.any(String))
      bad.push(theirs)
    }
    for (const value of bad) expectInvalidCursor(await get(list, { limit: '2', cursor: value }), value)
    // The cursor as written still pages.
    expect((await pageOf(list, { limit: '2', cursor })).items.map(list.idOf)).toEqual(
      whole.slice(2, 4).map(list.idOf),
    )
  })
})

describe('the document', () => {
  it('gives every paged list the one cursor parameter, its 400 problem and a nextCursor', async () => {
    const document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    const paged: string[] = []
    for (const item of Object.values(document.paths) as Record<string, Record<string, unknown>>[]) {
      for (const operation of Object.values(item) as {
        operationId: string
        parameters?: { name: string; in: string; schema: Record<string, unknown> }[]
        responses: Record<string, { content: Record<string, { schema: Record<string, unknown> }> }>
      }[]) {
        const cursor = operation.parameters?.find((p) => p.in === 'query' && p.name === 'cursor')
        if (!cursor) continue
        paged.push(operation.operationId)
        expect(cursor.schema, operation.operationId).toMatchObject({
          type: 'string',
          minLength: 1,
          maxLength: 2000,
          pattern: '^[A-Za-z0-9_-]+$',
        })
        expect(operation.responses['400']?.content['application/problem+json']?.schema).toEqual({
          $ref: '#/components/schemas/Problem',
        })
        const ok = operation.responses['200']?.content['application/json']?.schema as {
          $ref?: string
          properties?: Record<string, unknown>
        }
        const body = ok.$ref ? document.components.schemas[ok.$ref.split('/').pop() as string] : ok
        expect(Object.keys(body.properties), operation.operationId).toEqual(
          expect.arrayContaining(['items', 'nextCursor']),
        )
      }
    }
    expect(paged.sort()).toEqual(LISTS.map((list) => list.operationId).sort())
  })
})

describe('the cursor codec', () => {
  const codec = cursorCodec('things', { at: 'instant', id: 'uuid', name: 'text', sequence: 'serial' })
  const key = {
    at: new Date('2026-03-04T05:06:07.089Z'),
    id: '0b9c1c6e-4a51-4e8a-9d3e-2c1f5b6a7d80',
    name: 'zoë.o’brien+tag@exämple.com 😀',
    sequence: '9223372036854775807',
  }

  function expectRefused(cursor: string): void {
    let thrown: unknown
    try {
      codec.decode(cursor)
    } catch (error) {
      thrown = error
    }
    expect(thrown, cursor).toBeInstanceOf(AppError)
    expect(thrown).toMatchObject({
      code: 'VALIDATION_FAILED',
      status: 400,
      extensions: { errors: [{ path: 'querystring.cursor', message: 'is not a valid cursor' }] },
    })
  }

  it('writes a position as one URL-safe string and reads the same position back', () => {
    const cursor = codec.encode(key)
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(codec.decode(cursor)).toEqual(key)
    for (const at of ['0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z']) {
      const edge = { ...key, at: new Date(at), sequence: '1' }
      expect(codec.decode(codec.encode(edge))).toEqual(edge)
    }
  })

  it('refuses garbage, another list with the same shape, and a cursor spelled another way', () => {
    const values = ['things', key.at.toISOString(), key.id, key.name, key.sequence]
    expect(encode(values)).toBe(codec.encode(key))
    const same = cursorCodec('other-things', { at: 'instant', id: 'uuid', name: 'text', sequence: 'serial' })
    expectRefused(same.encode(key))
    for (const cursor of [
      '',
      'x',
      '!!!!',
      `${codec.encode(key)}=`,
      `${codec.encode(key)}*`,
      encode('things'),
    ])
      expectRefused(cursor)
    expectRefused(Buffer.from(JSON.stringify(values, null, 2)).toString('base64url'))
    expectRefused(Buffer.from(JSON.stringify(values).replace('things', '\\u0074hings')).toString('base64url'))
    expectRefused(Buffer.from(`{"0":"things"}`).toString('base64url'))
    expectRefused(Buffer.from([0xff, 0xfe, 0x5b]).toString('base64url'))
  })

  it.each([
    ['an instant that is not one', 1, 'yesterday'],
    ['an instant without milliseconds', 1, '2026-03-04T05:06:07Z'],
    ['an instant in another zone', 1, '2026-03-04T06:06:07.089+01:00'],
    ['an instant of year 0', 1, '0000-01-01T00:00:00.000Z'],
    ['an instant past year 9999', 1, '+010000-01-01T00:00:00.000Z'],
    ['an instant before year 1', 1, '-000001-12-31T00:00:00.000Z'],
    ['an instant as a number', 1, Date.parse('2026-03-04T05:06:07.089Z')],
    ['an id in upper case', 2, '0B9C1C6E-4A51-4E8A-9D3E-2C1F5B6A7D80'],
    ['an id that is not one', 2, 'not-a-uuid'],
    ['an id with SQL', 2, "'; drop table accounts; --"],
    ['text with NUL', 3, 'a\u0000b'],
    ['text with another control character', 3, 'a\u001bb'],
    ['text with a lone surrogate', 3, 'a\ud800b'],
    ['text as a number', 3, 42],
    ['a sequence of zero', 4, '0'],
    ['a negative sequence', 4, '-1'],
    ['a sequence with a leading zero', 4, '01'],
    ['a sequence past int8', 4, '9223372036854775808'],
    ['a sequence as a number', 4, 12],
    ['a sequence with a fraction', 4, '1.5'],
    ['null', 1, null],
  ])('refuses %s', (_, index, value) => {
    const values: unknown[] = ['things', key.at.toISOString(), key.id, key.name, key.sequence]
    values[index] = value
    expectRefused(encode(values))
  })

  it('refuses a cursor with a value more or less', () => {
    const values = ['things', key.at.toISOString(), key.id, key.name, key.sequence]
    expectRefused(encode(values.slice(0, -1)))
    expectRefused(encode([...values, '1']))
  })
})

describe('page', () => {
  const rows = [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]
  const keyOf = (row: { n: number }) => ({ after: row.n })

  it('reads one row more than a page shows', () => {
    expect(rowsToRead(1)).toBe(2)
    expect(rowsToRead(100)).toBe(101)
  })

  it('shows `limit` rows and the key of the last one shown when another row was read', () => {
    expect(page(rows, 3, keyOf)).toEqual({ items: rows.slice(0, 3), next: { after: 3 } })
    expect(page(rows, 1, keyOf)).toEqual({ items: rows.slice(0, 1), next: { after: 1 } })
  })

  it('has no next page when no row more was read', () => {
    expect(page(rows, 4, keyOf)).toEqual({ items: rows, next: null })
    expect(page(rows, 10, keyOf)).toEqual({ items: rows, next: null })
    expect(page([], 3, keyOf)).toEqual({ items: [], next: null })
  })
})
