import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { S3ObjectStore } from '../../src/storage/s3.ts'
import { startTestS3, type TestS3 } from '../helpers/s3.ts'

// Found by the kill -9 test (kill-restart.test.ts), whose clients upload at the same time: on the
// embedded S3 server (src/storage/embedded-s3.ts, which serves @20minutes/s3rver's filesystem
// store), an object written while another object of the same "directory" is deleted can be lost.
// DeleteObject prunes the directories its key leaves empty: it checks that the directory is empty
// (readdirSync), then, after an await, removes it recursively (fs.rm), taking along what a
// concurrent PutObject created there in between; the PUT has answered 200, or fails with 500. In
// the service this is two attachments of one purchase request uploaded at once: confirming the
// first deletes its staging object `uploads/org/<org>/purchase_request/<id>/<file>` while the
// second's bytes are written next to it; the second's confirm then answers 409 UPLOAD_NOT_FOUND for
// good. Here both steps are done as the service and a browser do them: the delete through the
// service's S3 adapter, the upload through a pre-signed PUT address, both at once.

const PAIRS = 40

describe('the embedded object store under concurrent writes and deletes', () => {
  let s3: TestS3
  let store: S3ObjectStore

  beforeAll(async () => {
    s3 = await startTestS3()
    store = s3.store()
  })

  afterAll(async () => {
    await store?.close()
    await s3?.close()
  })

  /** Puts `first`, then deletes it while `second` is uploaded through a pre-signed address; one outcome per pair. */
  async function deleteWhileUploading(pairs: { first: string; second: string }[]) {
    const headers = { contentType: 'text/plain', contentDisposition: 'attachment' }
    const body = 'bytes of the second attachment'
    const outcomes: { put: number; kept: boolean }[] = []
    for (const { first, second } of pairs) {
      await store.put(first, Buffer.from('staged bytes of the first attachment'), headers)
      const upload = await store.presignPut(second, 'text/plain', 60, new Date())
      const [, put] = await Promise.all([
        store.delete(first),
        fetch(upload.url, { method: 'PUT', headers: upload.headers, body }),
      ])
      outcomes.push({ put: put.status, kept: (await store.head(second))?.size === body.length })
    }
    return outcomes.filter((o) => o.put !== 200 || !o.kept)
  }

  it('keeps an object uploaded while another object of the same purchase request is deleted', async () => {
    const lost = await deleteWhileUploading(
      Array.from({ length: PAIRS }, (_, i) => ({
        first: `uploads/org/org-${i}/purchase_request/request-${i}/first`,
        second: `uploads/org/org-${i}/purchase_request/request-${i}/second`,
      })),
    )
    expect(lost, `${lost.length} of ${PAIRS} uploads refused or lost`).toEqual([])
  })
})
