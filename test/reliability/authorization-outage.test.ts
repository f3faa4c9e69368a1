import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { initializeOpenFga } from '../../src/authz/init.ts'
import { loadModel } from '../../src/authz/model.ts'
import { ACCOUNT_TEST_CONFIG, type Actor, asUser, expectProblem, newActor } from '../helpers/accounts.ts'
import { createTestApp, type TestApp } from '../helpers/app.ts'
import { queueTupleChanges } from '../helpers/authz.ts'
import { FakeOpenFga } from '../helpers/fake-openfga.ts'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts'

// The authorization server (an OpenFGA-compatible server, reached through a TCP proxy) goes away.
// Checks fail closed with 503, never an allow remembered from before; tuple changes stay queued and
// land, in order, once it is back.

describe('the authorization server going away under the service', () => {
  let fake: FakeOpenFga
  let proxy: TcpProxy
  let t: TestApp
  let storeId: string
  let admin: Actor

  beforeAll(async () => {
    fake = await FakeOpenFga.start()
    const openfga = await initializeOpenFga(fake.url, undefined, await loadModel())
    storeId = openfga.storeId
    proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(fake.url).port) })
    t = await createTestApp({
      config: {
        ...ACCOUNT_TEST_CONFIG,
        'platform.authz.openfga.api-url': `http://127.0.0.1:${proxy.port}`,
        'platform.authz.openfga.store-id': openfga.storeId,
        'platform.authz.openfga.model-id': openfga.modelId,
      },
    })
    admin = await newActor(t.app, { role: 'admin' })
  }, 60_000)

  afterAll(async () => {
    await t?.close()
    await proxy?.close()
    await fake?.close()
  })

  const check = () =>
    asUser(t.app, admin.session, {
      method: 'POST',
      url: '/api/authz/check',
      // A relation the admin holds as a direct tuple (the recording fake answers direct tuples only).
      payload: { relation: 'admin', objectType: 'organization', objectId: admin.user.organizationId },
    })

  it('fails closed with 503 while it is down, never with an allow it gave before', async () => {
    expect((await check()).json()).toEqual({ allowed: true })
    await proxy.cut()
    try {
      expectProblem(await check(), 503, 'SERVICE_UNAVAILABLE')
      const read = await asUser(t.app, admin.session, {
        method: 'GET',
        url: `/api/organizations/${admin.user.organizationId}/config`,
      })
      expect(read.statusCode, read.body).toBe(503)
      expectProblem(read, 503, 'SERVICE_UNAVAILABLE')
    } finally {
      await proxy.restore()
    }
    expect((await check()).json()).toEqual({ allowed: true })
  }, 30_000)

  it('keeps tuple changes queued while it is down and delivers them in order once it is back', async () => {
    const tuple = {
      subject: 'user:late',
      relation: 'member',
      object: `organization:${admin.user.organizationId}`,
    }
    await proxy.cut()
    try {
      // Written, deleted, written again: only the order of delivery decides what the server ends with.
      await queueTupleChanges(t.app, [{ operation: 'write', ...tuple }])
      await queueTupleChanges(t.app, [{ operation: 'delete', ...tuple }])
      await queueTupleChanges(t.app, [{ operation: 'write', ...tuple }])
      await t.app.authz.outbox.runOnce().catch(() => undefined)
      const pending = await t.app.db
        .selectFrom('authz_outbox')
        .select('id')
        .where('subject', '=', 'user:late')
        .where('processed_at', 'is', null)
        .execute()
      expect(pending).toHaveLength(3)
    } finally {
      await proxy.restore()
    }
    // Past the backoff the failed delivery set.
    t.clock.advanceSeconds(60)
    await t.app.authz.outbox.runOnce()
    expect(fake.tuples(storeId)).toContainEqual(
      expect.objectContaining({ user: 'user:late', relation: 'member', object: tuple.object }),
    )
    const left = await t.app.db
      .selectFrom('authz_outbox')
      .select('id')
      .where('subject', '=', 'user:late')
      .where('processed_at', 'is', null)
      .execute()
    expect(left).toEqual([])
  }, 30_000)
})
