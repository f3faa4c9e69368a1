import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { PurchaseRequestCursor } from '../src/features/purchase-requests/repository.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newActor, type Session } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// The purchase-request reads give their timestamps as text the database formats, not as a Date
// parsed and printed again: the text must be exactly what Date.toISOString() wrote for the stored
// value, microseconds cut off (never rounded up into the next millisecond, second or day), and the
// list's cursor exactly the one it encoded from that Date.

const t = useTestApp({ config: ACCOUNT_TEST_CONFIG })

let session: Session
let organizationId: string

async function created(title: string): Promise<string> {
  const res = await asUser(t.app, session, {
    method: 'POST',
    url: '/api/purchase-requests',
    payload: { title },
  })
  expect(res.statusCode).toBe(201)
  return res.json().id
}

/** Stores timestamps the service never writes itself: microseconds. */
async function stamp(id: string, createdAt: string, updatedAt: string): Promise<void> {
  await sql`update purchase_requests set created_at = ${createdAt}::timestamptz, updated_at = ${updatedAt}::timestamptz where id = ${id}`.execute(
    t.app.db,
  )
}

/** The stored values as the driver parses them into Dates. */
async function storedDates(id: string): Promise<{ created_at: Date; updated_at: Date }> {
  return t.app.db
    .selectFrom('purchase_requests')
    .select(['created_at', 'updated_at'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow()
}

describe('timestamps of purchase requests', () => {
  let older: string
  let newer: string

  beforeAll(async () => {
    const { user, session: signedIn } = await newActor(t.app)
    session = signedIn
    organizationId = user.organizationId
    older = await created('Older')
    newer = await created('Newer')
    await stamp(older, '2024-05-06T07:08:09.123999Z', '2024-12-31T23:59:59.999999Z')
    await stamp(newer, '2024-05-06T07:08:10.000500Z', '2024-05-06T07:08:10.0005Z')
  })

  it('shows microseconds cut to the millisecond, as Date.toISOString() did', async () => {
    const res = await asUser(t.app, session, { method: 'GET', url: `/api/purchase-requests/${older}` })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({
      organizationId,
      createdAt: '2024-05-06T07:08:09.123Z',
      updatedAt: '2024-12-31T23:59:59.999Z',
    })
    const stored = await storedDates(older)
    expect(res.json().createdAt).toBe(stored.created_at.toISOString())
    expect(res.json().updatedAt).toBe(stored.updated_at.toISOString())
  })

  it('lists the same text, and encodes the cursor from the same millisecond', async () => {
    const res = await asUser(t.app, session, {
      method: 'GET',
      url: '/api/purchase-requests',
      query: { limit: '1' },
    })
    expect(res.statusCode).toBe(200)
    const page = res.json()
    expect(page.items).toEqual([
      expect.objectContaining({
        id: newer,
        createdAt: '2024-05-06T07:08:10.000Z',
        updatedAt: '2024-05-06T07:08:10.000Z',
      }),
    ])
    const stored = await storedDates(newer)
    expect(page.nextCursor).toBe(PurchaseRequestCursor.encode({ createdAt: stored.created_at, id: newer }))

    const next = await asUser(t.app, session, {
      method: 'GET',
      url: '/api/purchase-requests',
      query: { limit: '1', cursor: page.nextCursor },
    })
    expect(next.json().items.map((item: { id: string }) => item.id)).toEqual([older])
    expect(next.json().items[0].createdAt).toBe('2024-05-06T07:08:09.123Z')
  })
})
