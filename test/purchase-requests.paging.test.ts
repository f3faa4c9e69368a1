import { beforeAll, describe, expect, it } from 'vitest'
import { ACCOUNT_TEST_CONFIG, asUser, expectProblem, newActor, type Session } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Keyset paging of GET /api/purchase-requests: newest first in (createdAt desc,
// id desc) order, `limit` 1..100 (default 20), an opaque `nextCursor` that is null on the last
// page, the status filter, and walks that stay exact while requests with equal creation times
// straddle page boundaries or new requests arrive mid-walk.

const t = useTestApp({ config: ACCOUNT_TEST_CONFIG })

interface Item {
  id: string
  status: string
  createdAt: string
}

interface Page {
  items: Item[]
  nextCursor: string | null
}

/** A member of a new organization, signed in, whose role tuple has been delivered. */
async function signedInMember(): Promise<{ session: Session; organizationId: string }> {
  const { user, session } = await newActor(t.app)
  return { session, organizationId: user.organizationId }
}

const list = (session: Session, query: Record<string, string | number>) =>
  asUser(t.app, session, {
    method: 'GET',
    url: '/api/purchase-requests',
    query: Object.fromEntries(Object.entries(query).map(([key, value]) => [key, String(value)])),
  })

async function page(session: Session, query: Record<string, string | number>): Promise<Page> {
  const res = await list(session, query)
  expect(res.statusCode).toBe(200)
  return res.json()
}

/** Follows nextCursor from `cursor` (or the first page) to the end; returns every page read. */
async function walk(
  session: Session,
  query: Record<string, string | number>,
  cursor: string | null = null,
): Promise<Page[]> {
  const pages: Page[] = []
  do {
    pages.push(await page(session, cursor === null ? query : { ...query, cursor }))
    cursor = pages.at(-1)?.nextCursor ?? null
  } while (cursor !== null && pages.length <= 100)
  return pages
}

const idsOf = (pages: Page[]) => pages.flatMap((p) => p.items.map((item) => item.id))

/** (createdAt desc, id desc): ISO instants of one format and lower-case UUIDs compare as strings. */
function newestFirst(a: Item, b: Item): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? 1 : -1
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0
}

/** The organization's requests as stored, in the order the list must give them. */
async function storedOrder(organizationId: string): Promise<Item[]> {
  const rows = await t.app.db
    .selectFrom('purchase_requests')
    .select(['id', 'status', 'created_at'])
    .where('organization_id', '=', organizationId)
    .execute()
  return rows
    .map((row) => ({ id: row.id, status: row.status, createdAt: row.created_at.toISOString() }))
    .sort(newestFirst)
}

async function create(session: Session, title: string): Promise<Item> {
  const res = await asUser(t.app, session, {
    method: 'POST',
    url: '/api/purchase-requests',
    payload: { title },
  })
  expect(res.statusCode).toBe(201)
  return res.json()
}

const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

describe('GET /api/purchase-requests paging', () => {
  let session: Session
  let organizationId: string
  /** The 45 requests, newest first. */
  let expected: Item[]
  let submittedIds: Set<string>

  beforeAll(async () => {
    ;({ session, organizationId } = await signedInMember())
    const created: Item[] = []
    // Twelve requests at one instant, then groups of three a second apart.
    for (let i = 0; i < 45; i++) {
      if (i >= 12 && i % 3 === 0) t.clock.advanceSeconds(1)
      created.push(await create(session, `Request ${i}`))
    }
    submittedIds = new Set()
    for (const item of created.filter((_, i) => i % 4 === 1)) {
      const res = await asUser(t.app, session, {
        method: 'POST',
        url: `/api/purchase-requests/${item.id}/submit`,
      })
      expect(res.statusCode).toBe(200)
      submittedIds.add(item.id)
    }
    expected = await storedOrder(organizationId)
    expect(expected).toHaveLength(45)
    expect(new Set(created.map((item) => item.createdAt)).size).toBe(12)
  })

  it('walks all requests with limit=10: each exactly once, newest first, nextCursor null only on the last page', async () => {
    const pages = await walk(session, { limit: 10 })

    expect(pages.map((p) => p.items.length)).toEqual([10, 10, 10, 10, 5])
    expect(pages.map((p) => p.nextCursor === null)).toEqual([false, false, false, false, true])
    const ids = idsOf(pages)
    expect(new Set(ids).size).toBe(45)
    expect(ids).toEqual(expected.map((item) => item.id))
    const items = pages.flatMap((p) => p.items)
    for (let i = 1; i < items.length; i++)
      expect(newestFirst(items[i - 1] as Item, items[i] as Item)).toBe(-1)
    // Page boundaries fall inside groups of requests created at the same instant.
    const boundaries = pages.slice(0, -1).map((p, i) => [p.items.at(-1), pages[i + 1]?.items[0]])
    const splitGroups = boundaries.filter(([last, next]) => last?.createdAt === next?.createdAt)
    expect(splitGroups.length).toBeGreaterThanOrEqual(2)
  })

  it('ends with nextCursor null when the last page is exactly full', async () => {
    const pages = await walk(session, { limit: 15 })
    expect(pages.map((p) => p.items.length)).toEqual([15, 15, 15])
    expect(pages.at(-1)?.nextCursor).toBeNull()
    expect(idsOf(pages)).toEqual(expected.map((item) => item.id))

    expect(await page(session, { limit: 45 })).toMatchObject({ nextCursor: null })
  })

  it('returns 20 items by default and up to 100 when asked', async () => {
    const first = await page(session, {})
    expect(first.items.map((item) => item.id)).toEqual(expected.slice(0, 20).map((item) => item.id))
    expect(first.nextCursor).toEqual(expect.any(String))

    const all = await page(session, { limit: 100 })
    expect(all.items.map((item) => item.id)).toEqual(expected.map((item) => item.id))
    expect(all.nextCursor).toBeNull()

    const one = await page(session, { limit: 1 })
    expect(one.items.map((item) => item.id)).toEqual([expected[0]?.id])
  })

  it.each([0, 101, -1, 'ten', 1.5])('rejects limit=%s with 400 VALIDATION_FAILED', async (limit) => {
    expectProblem(await list(session, { limit }), 400, 'VALIDATION_FAILED')
  })

  it('rejects a tampered or garbage cursor with 400 VALIDATION_FAILED', async () => {
    const cursor = (await page(session, { limit: 10 })).nextCursor ?? ''
    const [name, createdAt, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as string[]
    expect(encode([name, createdAt, id])).toBe(cursor)
    const bad = [
      'garbage',
      '!!!!',
      cursor.slice(0, -4),
      encode({ name, createdAt, id }),
      encode([name, createdAt]),
      encode([createdAt, id]),
      encode(['api-keys', createdAt, id]),
      encode(null),
      encode([name, 'yesterday', id]),
      encode([name, createdAt, 'not-a-uuid']),
      encode([name, createdAt, `'; drop table purchase_requests; --${'x'.repeat(10)}`]),
      encode([name, createdAt, id?.toUpperCase()]),
      'x'.repeat(2001),
      `${cursor}%%%`,
    ]
    for (const value of bad) {
      const res = await list(session, { limit: 10, cursor: value })
      expect(res.statusCode, value).toBe(400)
      expectProblem(res, 400, 'VALIDATION_FAILED')
    }
    // The cursor as returned still works.
    expect((await page(session, { limit: 10, cursor })).items.map((item) => item.id)).toEqual(
      expected.slice(10, 20).map((item) => item.id),
    )
  })

  it('pages through one status only with the status filter', async () => {
    const pages = await walk(session, { limit: 4, status: 'SUBMITTED' })

    const ids = idsOf(pages)
    expect(ids).toEqual(expected.filter((item) => submittedIds.has(item.id)).map((item) => item.id))
    expect(ids).toHaveLength(submittedIds.size)
    expect(pages.flatMap((p) => p.items).every((item) => item.status === 'SUBMITTED')).toBe(true)
    expect(pages.at(-1)?.nextCursor).toBeNull()

    const drafts = idsOf(await walk(session, { limit: 7, status: 'DRAFT' }))
    expect(drafts).toEqual(expected.filter((item) => !submittedIds.has(item.id)).map((item) => item.id))
    expect(await page(session, { status: 'APPROVED' })).toEqual({ items: [], nextCursor: null })
    expectProblem(await list(session, { status: 'REJECTED' }), 400, 'VALIDATION_FAILED')
  })
})

describe('requests created during a walk', () => {
  it('do not make the walk skip or repeat the requests that existed when it started', async () => {
    const { session, organizationId } = await signedInMember()
    for (let i = 0; i < 7; i++) {
      t.clock.advance(250)
      await create(session, `Older ${i}`)
    }
    t.clock.advanceSeconds(1)
    for (let i = 0; i < 8; i++) await create(session, `Same instant ${i}`)
    const before = await storedOrder(organizationId)

    const first = await page(session, { limit: 5 })
    expect(first.items.map((item) => item.id)).toEqual(before.slice(0, 5).map((item) => item.id))

    // New requests: some at the same instant as the page's last one, some later.
    for (let i = 0; i < 6; i++) await create(session, `Concurrent ${i}`)
    t.clock.advanceSeconds(1)
    for (let i = 0; i < 3; i++) await create(session, `Newer ${i}`)
    const after = await storedOrder(organizationId)
    expect(after).toHaveLength(24)

    const rest = await walk(session, { limit: 5 }, first.nextCursor)
    const walked = [...first.items.map((item) => item.id), ...idsOf(rest)]

    expect(new Set(walked).size).toBe(walked.length)
    for (const item of before) expect(walked.filter((id) => id === item.id)).toHaveLength(1)
    // The rest of the walk is exactly what follows the first page's last request now.
    const last = first.items.at(-1)
    if (!last) throw new Error('the first page is empty')
    const position = after.findIndex((item) => item.id === last.id)
    expect(idsOf(rest)).toEqual(after.slice(position + 1).map((item) => item.id))
    expect(rest.at(-1)?.nextCursor).toBeNull()
  })
})
