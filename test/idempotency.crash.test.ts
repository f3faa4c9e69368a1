import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Actor, asUser, FAST_LOGIN_CONFIG, newActor } from './helpers/accounts.ts'
import { createTestApp, type TestApp, testSecret } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { initiateBody } from './helpers/files.ts'

// A create's answer lost with the process that was sending it: the create committed, and the
// service died before it could record its answer under the Idempotency-Key (here: the answer hangs
// in an onSend hook, as if the process had stopped there). The client retries with the same key on
// another instance (a restart), after the claim has been abandoned for longer than a request can
// run. It must get the resource that was created, not a second one. The answer is therefore
// recorded in the create's own transaction.

/** Holds every answer of `url` in onSend until `release()`: the process "stops" before answering. */
function holdAnswers(url: string) {
  let release: () => void = () => undefined
  const gate = new Promise<void>((resolve) => {
    release = resolve
  })
  return {
    release,
    configure: (app: FastifyInstance) => {
      app.addHook('onSend', async (request, _reply, payload) => {
        if (request.routeOptions.url === url && request.method === 'POST') await gate
        return payload
      })
    },
  }
}

describe('Idempotency-Key when the service dies between commit and answer', () => {
  let database: TestDatabase
  let first: TestApp
  let restarted: TestApp
  let admin: Actor
  const held = [
    holdAnswers('/api/purchase-requests'),
    holdAnswers('/api/storage/files'),
    holdAnswers('/api/users'),
  ]

  beforeAll(async () => {
    database = await createTestDatabase()
    const config = { ...FAST_LOGIN_CONFIG, 'platform.auth.jwt.secret': testSecret() }
    first = await createTestApp({
      database,
      config,
      configure: (app) => {
        for (const hold of held) hold.configure(app)
      },
    })
    restarted = await createTestApp({ database, config })
    admin = await newActor(first.app, { role: 'admin' })
  }, 60_000)

  afterAll(async () => {
    for (const hold of held) hold.release()
    await restarted?.close()
    await first?.close()
    await database?.dispose()
  })

  const count = async (query: ReturnType<typeof sql>) =>
    Number(
      (await sql<{ n: string }>`select count(*) as n from (${query}) q`.execute(database.handle.db)).rows[0]
        ?.n,
    )

  /**
   * Sends `request` to the first instance and waits until `committed` (its answer never comes),
   * then sends the retry to the restarted one.
   */
  async function crashAndRetry(request: { url: string; payload: object }, committed: () => Promise<boolean>) {
    const headers = { 'idempotency-key': randomUUID() }
    void asUser(first.app, admin.session, { method: 'POST', ...request, headers })
    for (let i = 0; !(await committed()); i++) {
      if (i > 2_000) throw new Error('the create did not commit')
      await new Promise((resolve) => setImmediate(resolve))
    }
    // Longer than any request may run: the claim counts as abandoned.
    restarted.clock.advance(2 * 60_000)
    return asUser(restarted.app, admin.session, { method: 'POST', ...request, headers })
  }

  it('returns the purchase request that was created, and creates no second one', async () => {
    const title = `Crash ${randomUUID().slice(0, 8)}`
    const retry = await crashAndRetry(
      { url: '/api/purchase-requests', payload: { title } },
      async () => (await count(sql`select 1 from purchase_requests where title = ${title}`)) > 0,
    )
    expect(retry.statusCode, retry.body).toBe(201)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(await count(sql`select 1 from purchase_requests where title = ${title}`)).toBe(1)
    const [row] = (
      await sql<{ id: string }>`select id from purchase_requests where title = ${title}`.execute(
        database.handle.db,
      )
    ).rows
    expect(retry.json().id).toBe(row?.id)
    expect(retry.headers.location).toBe(`/api/purchase-requests/${row?.id}`)
  })
  it('returns the upload that was initiated (same file, same address), and records no second file', async () => {
    const created = await asUser(restarted.app, admin.session, {
      method: 'POST',
      url: '/api/purchase-requests',
      payload: { title: 'With attachment' },
    })
    const resourceId = created.json().id as string
    const files = () => count(sql`select 1 from files where resource_id = ${resourceId}`)
    const retry = await crashAndRetry(
      { url: '/api/storage/files', payload: initiateBody({ resourceId }) },
      async () => (await files()) > 0,
    )
    expect(retry.statusCode, retry.body).toBe(201)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(await files()).toBe(1)
    const [file] = (
      await sql<{ id: string }>`select id from files where resource_id = ${resourceId}`.execute(
        database.handle.db,
      )
    ).rows
    expect(retry.json().fileId).toBe(file?.id)
    expect(retry.json().uploadUrl).toContain(file?.id)
  })

  it('returns the invitation that was made (one account, one email)', async () => {
    const email = `crash-${randomUUID()}@example.com`
    const accounts = () => count(sql`select 1 from accounts where email = ${email}`)
    const retry = await crashAndRetry(
      { url: '/api/users', payload: { email, organizationId: admin.user.organizationId, role: 'member' } },
      async () => (await accounts()) > 0,
    )
    expect(retry.statusCode, retry.body).toBe(202)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(await accounts()).toBe(1)
    expect(await count(sql`select 1 from mail_outbox where recipient = ${email}`)).toBe(1)
  })
})
