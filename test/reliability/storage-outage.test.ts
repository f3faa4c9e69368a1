import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ACCOUNT_TEST_CONFIG, expectProblem } from '../helpers/accounts.ts'
import { createTestApp, type TestApp } from '../helpers/app.ts'
import { TestClock } from '../helpers/clock.ts'
import { confirm, initiated, newEditor, putBytes } from '../helpers/files.ts'
import { startTestS3, type TestS3 } from '../helpers/s3.ts'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts'

// The S3 store goes away (a TCP proxy in front of the embedded server is cut) while uploads are
// under way. Signing needs no store; confirming does, and waits for it.

describe('the object store going away under the service', () => {
  let s3: TestS3
  let proxy: TcpProxy
  let t: TestApp

  beforeAll(async () => {
    s3 = await startTestS3()
    proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(s3.endpoint).port) })
    t = await createTestApp({
      clock: new TestClock(new Date()),
      config: {
        ...ACCOUNT_TEST_CONFIG,
        ...s3.config,
        'platform.storage.s3.endpoint': `http://127.0.0.1:${proxy.port}`,
      },
    })
  }, 60_000)

  afterAll(async () => {
    await t?.close()
    await proxy?.close()
    await s3?.close()
  })

  const status = async (id: string) =>
    (await t.app.db.selectFrom('files').select('status').where('id', '=', id).executeTakeFirstOrThrow())
      .status

  it('initiate still signs, confirm answers 503 and leaves the file PENDING, and confirms once the store is back', async () => {
    const { session, resourceId } = await newEditor(t.app)
    await proxy.cut()
    const upload = await initiated(t.app, session, { resourceId, contentType: 'text/plain' })
    await proxy.restore()
    expect((await putBytes(upload, 'bytes that arrived')).status).toBe(200)

    await proxy.cut()
    const refused = await confirm(t.app, session, upload.fileId)
    expectProblem(refused, 503, 'SERVICE_UNAVAILABLE')
    expect(refused.headers['retry-after']).toBeDefined()
    expect(await status(upload.fileId)).toBe('PENDING')
    const ready = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expect(ready.statusCode).toBe(503)
    await proxy.restore()

    const confirmed = await confirm(t.app, session, upload.fileId)
    expect(confirmed.statusCode, confirmed.body).toBe(200)
    expect(confirmed.json()).toMatchObject({ status: 'CONFIRMED', sizeBytes: 18 })
  }, 60_000)
})
