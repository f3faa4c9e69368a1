import { describe, expect, it } from 'vitest'
import type { CheckRequest, TupleKey } from '../src/authz/port.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, signIn } from './helpers/accounts.ts'
import { createTestApp } from './helpers/app.ts'
import { SwitchablePort, switchableTestPort } from './helpers/authz.ts'
import { createTestDatabase } from './helpers/database.ts'

// Read-your-writes: with an authorization server (tuples go through the outbox), a create answers
// without waiting for its tuple to be delivered, and the creator can still read what they created
// at once: a check that would deny while a change about its subject or object is queued delivers
// it first. Here the server is the adapter under test (the embedded evaluator, or OpenFGA with
// TEST_AUTHZ=openfga) behind a port whose writes the test holds.

/** A port whose writes wait until the test opens the gate. */
class GatedPort extends SwitchablePort {
  #open: () => void = () => undefined
  #gate: Promise<void> | null = null
  writesStarted = 0

  hold(): void {
    this.#gate = new Promise<void>((resolve) => {
      this.#open = resolve
    })
  }

  open(): void {
    this.#open()
    this.#gate = null
  }

  override async write(writes: TupleKey[], deletes: TupleKey[]): Promise<void> {
    this.writesStarted += 1
    await this.#gate
    return super.write(writes, deletes)
  }
}

/**
 * A port whose next check answers from the server as it is, then lets `meanwhile` run before the
 * answer reaches the caller: the delivery of a queued change finishing between the check's question
 * and its look at the queue, as the create's own delivery run can.
 */
class LateAnswerPort extends GatedPort {
  meanwhile: (() => Promise<void>) | null = null

  override async check(request: CheckRequest): Promise<boolean> {
    const answer = await super.check(request)
    const meanwhile = this.meanwhile
    this.meanwhile = null
    if (meanwhile) await meanwhile()
    return answer
  }
}

describe('read-your-writes with an authorization server', () => {
  it('answers a create before its ownership tuple is delivered, and a read right after still succeeds', async () => {
    const database = await createTestDatabase()
    const inner = await switchableTestPort(database.handle.db)
    const port = new LateAnswerPort(inner.inner)
    const t = await createTestApp({ database, config: ACCOUNT_TEST_CONFIG, deps: { authorization: port } })
    try {
      const creator = await newUser(t.app)
      const outsider = await newUser(t.app)
      await t.app.authz.outbox.runOnce()
      const session = await signIn(t.app, creator)
      const outsiderSession = await signIn(t.app, outsider)

      // The server does not answer writes: the create must not wait for it.
      port.hold()
      const created = await asUser(t.app, session, {
        method: 'POST',
        url: '/api/purchase-requests',
        payload: { title: 'Monitors' },
      })
      expect(created.statusCode).toBe(201)
      const { id } = created.json()
      expect(port.delivered.some((change) => change.endsWith(`purchase_request:${id}`))).toBe(false)
      expect(await t.app.authz.outbox.pending()).toBe(1)

      // The creator reads at once: the check, answered no while the server still holds the write,
      // finds the queued change and delivers it first. The server takes writes again only once that
      // no is in, so the create's own delivery cannot land before the check is asked.
      port.meanwhile = async () => port.open()
      const answer = await asUser(t.app, session, { method: 'GET', url: `/api/purchase-requests/${id}` })
      expect(port.meanwhile).toBeNull()
      expect(answer.statusCode, answer.body).toBe(200)
      expect(answer.json().id).toBe(id)
      expect(port.delivered).toContain(
        `write organization:${creator.organizationId} owner_organization purchase_request:${id}`,
      )
      expect(await t.app.authz.outbox.pending()).toBe(0)

      // Another organization is still refused, and a refusal with nothing queued costs no delivery.
      const writes = port.writesStarted
      const refused = await asUser(t.app, outsiderSession, {
        method: 'GET',
        url: `/api/purchase-requests/${id}`,
      })
      expect(refused.statusCode).toBe(403)
      expect(port.writesStarted).toBe(writes)
    } finally {
      port.open()
      await t.close()
      await port.close()
      await database.dispose()
    }
  })

  it('allows when the change is delivered between the check and its look at the queue', async () => {
    const database = await createTestDatabase()
    const inner = await switchableTestPort(database.handle.db)
    const port = new LateAnswerPort(inner.inner)
    const t = await createTestApp({
      database,
      config: ACCOUNT_TEST_CONFIG,
      deps: { authorization: port },
    })
    try {
      const creator = await newUser(t.app)
      await t.app.authz.outbox.runOnce()
      const session = await signIn(t.app, creator)
      port.hold()
      const created = await asUser(t.app, session, {
        method: 'POST',
        url: '/api/purchase-requests',
        payload: { title: 'Desks' },
      })
      expect(created.statusCode).toBe(201)
      const { id } = created.json()
      expect(await t.app.authz.outbox.pending()).toBe(1)

      // The check is answered "no" (the tuple is not at the server yet); before that answer is
      // used, the create's delivery lands and marks the change delivered: the queue is empty when
      // the check looks at it.
      port.meanwhile = async () => {
        port.open()
        await t.app.authz.outbox.runOnce()
      }
      const read = await asUser(t.app, session, { method: 'GET', url: `/api/purchase-requests/${id}` })
      expect(read.statusCode, read.body).toBe(200)
      expect(port.meanwhile).toBeNull()
      expect(await t.app.authz.outbox.pending()).toBe(0)
    } finally {
      port.open()
      await t.close()
      await port.close()
      await database.dispose()
    }
  })

  it('keeps refusing while the server cannot take the change, and allows once it can', async () => {
    const database = await createTestDatabase()
    const inner = await switchableTestPort(database.handle.db)
    const t = await createTestApp({ database, config: ACCOUNT_TEST_CONFIG, deps: { authorization: inner } })
    try {
      const creator = await newUser(t.app)
      await t.app.authz.outbox.runOnce()
      const session = await signIn(t.app, creator)
      inner.failures.write = new Error('connect ECONNREFUSED')
      const created = await asUser(t.app, session, {
        method: 'POST',
        url: '/api/purchase-requests',
        payload: { title: 'Chairs' },
      })
      expect(created.statusCode).toBe(201)
      const url = `/api/purchase-requests/${created.json().id}`
      expect((await asUser(t.app, session, { method: 'GET', url })).statusCode).toBe(403)
      inner.failures = {}
      t.clock.advance(5 * 60_000)
      expect((await asUser(t.app, session, { method: 'GET', url })).statusCode).toBe(200)
    } finally {
      await t.close()
      await inner.close()
      await database.dispose()
    }
  })
})
