import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { AuthorizationUnavailableError, type TupleKey } from '../src/authz/port.ts'
import type { TupleChange } from '../src/authz/tuples.ts'
import { ACCOUNT_TEST_CONFIG, newUser, signIn } from './helpers/accounts.ts'
import { createTestApp } from './helpers/app.ts'
import {
  describeChange,
  queueOwnedPurchaseRequest,
  queueTupleChanges,
  useAuthzTestApp,
} from './helpers/authz.ts'

// Tuple consistency through the authorization outbox: changes are queued with the
// database change that causes them and delivered in order under a lease, so an authorization
// server that is down delays access but never loses it; a change the model rejects is set aside.

const t = useAuthzTestApp()

const MAX_BACKOFF_MS = 5 * 60_000

// Each test leaves the queue empty: the server is healed and what is left is delivered.
afterEach(async () => {
  t.port.failures = {}
  t.clock.advance(MAX_BACKOFF_MS)
  await t.app.authz.outbox.runOnce()
  expect(await t.app.authz.outbox.pending()).toBe(0)
})

const runOnce = () => t.app.authz.outbox.runOnce()

const serverDown = () => new AuthorizationUnavailableError('connect ECONNREFUSED 127.0.0.1:8080')

const outboxRows = (ids?: string[]) => {
  let query = t.app.db.selectFrom('authz_outbox').selectAll().orderBy('id')
  if (ids) query = query.where('id', 'in', ids)
  return query.execute()
}

const pendingRows = () =>
  t.app.db.selectFrom('authz_outbox').selectAll().where('processed_at', 'is', null).orderBy('id').execute()

const tuple = (user: string, relation: string, object: string): TupleKey => ({ user, relation, object })

const change = (operation: TupleChange['operation'], key: TupleKey): TupleChange => ({
  operation,
  subject: key.user,
  relation: key.relation,
  object: key.object,
})

const exists = (key: TupleKey) => t.port.inner.check(key)

/** A fresh `user:<id> member organization:<id>` tuple. */
const memberTuple = () => tuple(`user:${randomUUID()}`, 'member', `organization:${randomUUID()}`)

describe('authorization outbox', () => {
  it('keeps the changes while the authorization server is down, backs off, and delivers them once it is back', async () => {
    t.port.failures.write = serverDown()
    const member = await newUser(t.app)
    const purchaseRequest = await queueOwnedPurchaseRequest(t.app, member.organizationId)
    const session = await signIn(t.app, member)
    const canView = async () => {
      const res = await t.app.inject({
        method: 'POST',
        url: '/api/authz/check',
        cookies: { access_token: session.access },
        payload: { relation: 'can_view', objectType: 'purchase_request', objectId: purchaseRequest },
      })
      expect(res.statusCode).toBe(200)
      return res.json().allowed
    }

    const queued = await pendingRows()
    expect(queued.map((r) => `${r.operation} ${r.subject} ${r.relation} ${r.object}`)).toEqual([
      `write user:${member.id} member organization:${member.organizationId}`,
      `write organization:${member.organizationId} owner_organization purchase_request:${purchaseRequest}`,
    ])
    const ids = queued.map((r) => r.id)

    // Down: nothing is delivered, the head of the queue backs off (2 s less a random half: the
    // engine's policy), the rest waits behind it.
    const firstFailure = t.clock.now()
    expect(await runOnce()).toBe(0)
    let [head, next] = await outboxRows(ids)
    expect(head).toMatchObject({
      processed_at: null,
      attempts: 1,
      last_error: expect.stringContaining('ECONNREFUSED'),
    })
    const waitAfter = (row: typeof head, failure: Date) =>
      (row?.next_attempt_at.getTime() ?? 0) - failure.getTime()
    expect(waitAfter(head, firstFailure)).toBeGreaterThanOrEqual(1000)
    expect(waitAfter(head, firstFailure)).toBeLessThanOrEqual(2000)
    expect(next).toMatchObject({ processed_at: null, attempts: 0, last_error: null })
    expect(await canView()).toBe(false)

    // Before the backoff has passed, the server is not even asked.
    const attempts = t.port.attempts
    t.clock.advance(waitAfter(head, firstFailure) - 1)
    expect(await runOnce()).toBe(0)
    expect(t.port.attempts).toBe(attempts)

    // Still down at the next attempt: the backoff doubles (2 s × 2^(attempts−1), less a random half).
    t.clock.advance(1)
    const secondFailure = t.clock.now()
    expect(await runOnce()).toBe(0)
    ;[head] = await outboxRows(ids)
    expect(head).toMatchObject({ processed_at: null, attempts: 2 })
    expect(waitAfter(head, secondFailure)).toBeGreaterThanOrEqual(2000)
    expect(waitAfter(head, secondFailure)).toBeLessThanOrEqual(4000)
    expect(await t.app.authz.outbox.pending()).toBe(2)
    expect(await canView()).toBe(false)

    // Back: once the backoff has passed, both changes are delivered and the resource is readable.
    t.port.failures = {}
    t.clock.advance(waitAfter(head, secondFailure))
    expect(await runOnce()).toBe(2)
    ;[head, next] = await outboxRows(ids)
    expect(head?.processed_at).toEqual(t.clock.now())
    expect(next?.processed_at).toEqual(t.clock.now())
    expect(await canView()).toBe(true)
  })

  it('flush() tries what is queued at once, whatever its backoff: an explicit delivery (the CLI) does not wait for it', async () => {
    t.port.failures.write = serverDown()
    const member = await newUser(t.app)
    await queueOwnedPurchaseRequest(t.app, member.organizationId)
    expect(await runOnce()).toBe(0)
    const [head] = await pendingRows()
    expect(head?.next_attempt_at.getTime()).toBeGreaterThan(t.clock.now().getTime())
    // The server is back; the clock has not reached the backoff.
    t.port.failures = {}
    expect(await t.app.authz.outbox.flush(0)).toEqual({ pending: 0, lastError: null })
    // A flush against a server still down backs off as before.
    t.port.failures.write = serverDown()
    await queueOwnedPurchaseRequest(t.app, member.organizationId)
    const left = await t.app.authz.outbox.flush(0)
    expect(left.pending).toBe(1)
    const [stillQueued] = await pendingRows()
    expect(stillQueued?.attempts).toBe(1)
    expect(stillQueued?.next_attempt_at.getTime()).toBeGreaterThan(t.clock.now().getTime())
  })

  it('delivers the changes of one tuple in the order they were queued', async () => {
    const kept = memberTuple()
    const removed = memberTuple()
    await queueTupleChanges(t.app, [
      change('write', kept),
      change('delete', kept),
      change('write', kept),
      change('write', removed),
      change('delete', removed),
    ])
    expect(await runOnce()).toBe(5)
    expect(await exists(kept)).toBe(true)
    expect(await exists(removed)).toBe(false)
  })

  it('sets aside a change the model rejects and still delivers the changes queued after it', async () => {
    const user = `user:${randomUUID()}`
    const rejected = tuple(user, 'owner_organization', `purchase_request:${randomUUID()}`)
    const after = [memberTuple(), memberTuple()]

    // Alone at the head of the queue, and in a batch with valid changes.
    await queueTupleChanges(t.app, [change('write', rejected)])
    expect(await runOnce()).toBe(0)
    await queueTupleChanges(t.app, [change('write', rejected), ...after.map((key) => change('write', key))])
    expect(await runOnce()).toBe(2)

    const rows = await outboxRows()
    const [alone, inBatch, ...delivered] = rows.slice(-4)
    for (const row of [alone, inBatch]) {
      // Dead-lettered: never retried, counted by the metrics and listed by the CLI.
      expect(row).toMatchObject({
        subject: user,
        processed_at: t.clock.now(),
        failed_at: t.clock.now(),
        attempts: 0,
      })
      expect(row?.last_error).toMatch(/^rejected: /)
    }
    for (const row of delivered)
      expect(row).toMatchObject({ processed_at: t.clock.now(), failed_at: null, last_error: null })
    for (const key of after) expect(await exists(key)).toBe(true)
    const stored = await t.app.db
      .selectFrom('authz_tuples')
      .select('object_id')
      .where('object_id', '=', rejected.object.slice('purchase_request:'.length))
      .execute()
    expect(stored).toEqual([])
    expect(t.logs.text()).toContain('authorization change rejected by the model; set aside')
  })

  it('delivers each change once and in order when two instances run at the same time', async () => {
    const other = await createTestApp({
      database: t.database,
      clock: t.clock,
      config: ACCOUNT_TEST_CONFIG,
      deps: { authorization: t.port },
    })
    try {
      const [a, b, c] = [memberTuple(), memberTuple(), memberTuple()]
      const changes = [
        change('write', a),
        change('delete', a),
        change('write', a),
        change('write', b),
        change('delete', b),
        change('write', c),
      ]
      await queueTupleChanges(t.app, changes)
      const ids = (await pendingRows()).map((r) => r.id)
      t.port.delivered.length = 0

      const applied = await Promise.all([runOnce(), other.app.authz.outbox.runOnce()])

      // One instance held the lease and delivered everything; the other found it taken.
      expect(applied.toSorted((x, y) => x - y)).toEqual([0, changes.length])
      const expected = changes.map((c) => describeChange(c.operation, tuple(c.subject, c.relation, c.object)))
      expect(t.port.delivered.toSorted()).toEqual(expected.toSorted())
      expect(t.port.delivered.filter((d) => d.endsWith(` ${a.object}`))).toEqual([
        describeChange('write', a),
        describeChange('delete', a),
        describeChange('write', a),
      ])
      expect(await exists(a)).toBe(true)
      expect(await exists(b)).toBe(false)
      expect(await exists(c)).toBe(true)
      for (const row of await outboxRows(ids)) {
        expect(row).toMatchObject({ processed_at: t.clock.now(), attempts: 0, last_error: null })
      }
    } finally {
      await other.close()
    }
  })

  it('kick() never throws: a failed delivery stays queued for the poller', async () => {
    t.port.failures.write = serverDown()
    const key = memberTuple()
    await queueTupleChanges(t.app, [change('write', key)])
    await expect(t.app.authz.outbox.kick()).resolves.toBeUndefined()
    expect(await pendingRows()).toEqual([
      expect.objectContaining({
        subject: key.user,
        attempts: 1,
        last_error: expect.stringContaining('ECONNREFUSED'),
      }),
    ])
    expect(await exists(key)).toBe(false)

    // A run that itself fails (the database unreachable) is swallowed and logged too.
    const runOnceSpy = vi
      .spyOn(t.app.authz.outbox, 'runOnce')
      .mockRejectedValueOnce(new Error('connect ECONNREFUSED 127.0.0.1:5432'))
    try {
      await expect(t.app.authz.outbox.kick()).resolves.toBeUndefined()
      expect(runOnceSpy).toHaveBeenCalledOnce()
    } finally {
      runOnceSpy.mockRestore()
    }
    expect(t.logs.text()).toContain('authorization outbox delivery failed')
  })
})
