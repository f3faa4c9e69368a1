import { randomUUID } from 'node:crypto'
import type { LightMyRequestResponse } from 'fastify'
import { describe, expect, it } from 'vitest'
import { expectProblem } from './helpers/accounts.ts'
import {
  confirm,
  downloadUrl,
  type Editor,
  filesOfUrl,
  initiate,
  initiateBody,
  initiated,
  listFiles,
  newEditor,
  putBytes,
  type Upload,
  useFilesTestApp,
} from './helpers/files.ts'
import { newDeliveredApiKey } from './helpers/machines.ts'

// Files never cross organizations: another organization's user or API key gets 403 ACCESS_DENIED
// on the resource or 404 for the file id, never the file, its key or an address. Machine
// principals need the route's scope (files:read / files:write) and, like users, the relation on
// the resource; a service account has no organization at all.

const t = useFilesTestApp()

type Tenant = Editor

/** An organization admin signed in, with a purchase request of their organization. */
const tenant = () => newEditor(t.app)

/** A confirmed file on the tenant's resource. */
async function confirmedFile(owner: Tenant): Promise<Upload> {
  const upload = await initiated(t.app, owner.session, {
    resourceId: owner.resourceId,
    fileName: 'secret.pdf',
  })
  expect((await putBytes(upload, 'confidential')).status).toBe(200)
  expect((await confirm(t.app, owner.session, upload.fileId)).statusCode).toBe(200)
  return upload
}

function expectNothingOf(res: LightMyRequestResponse, upload: Upload, owner: Tenant) {
  expect(res.body).not.toContain(upload.fileId)
  expect(res.body).not.toContain(owner.organizationId)
  expect(res.body).not.toContain('secret.pdf')
  expect(res.body).not.toContain('X-Amz-Signature')
}

const apiKey = (organizationId: string, scopes: string[]) => newDeliveredApiKey(t.app, organizationId, scopes)

const asKey = (headers: Record<string, string>, method: 'GET' | 'POST', url: string, payload?: object) =>
  t.app.inject({ method, url, headers, ...(payload ? { payload } : {}) })

describe("another organization's user", () => {
  it('cannot start an upload to the resource (403 ACCESS_DENIED)', async () => {
    const owner = await tenant()
    const intruder = await tenant()
    const res = await initiate(t.app, intruder.session, { resourceId: owner.resourceId })
    expectProblem(res, 403, 'ACCESS_DENIED')
    expect(
      await t.app.db.selectFrom('files').select('id').where('resource_id', '=', owner.resourceId).execute(),
    ).toEqual([])
  })

  it('cannot confirm, download or list the files (404 for the file id, 403 on the resource)', async () => {
    const owner = await tenant()
    const upload = await confirmedFile(owner)
    const intruder = await tenant()

    const confirmRes = await confirm(t.app, intruder.session, upload.fileId)
    expectProblem(confirmRes, 404, 'NOT_FOUND')
    expectNothingOf(confirmRes, upload, owner)

    const download = await downloadUrl(t.app, intruder.session, upload.fileId)
    expectProblem(download, 404, 'NOT_FOUND')
    expectNothingOf(download, upload, owner)

    const list = await listFiles(t.app, intruder.session, owner.resourceId)
    expectProblem(list, 403, 'ACCESS_DENIED')
    expectNothingOf(list, upload, owner)
  })

  it('answers a file of another organization exactly as an id that does not exist', async () => {
    const owner = await tenant()
    const upload = await confirmedFile(owner)
    const intruder = await tenant()
    const theirs = await downloadUrl(t.app, intruder.session, upload.fileId)
    const unknown = await downloadUrl(t.app, intruder.session, randomUUID())
    expect({ status: theirs.statusCode, body: theirs.json() }).toEqual({
      status: unknown.statusCode,
      body: unknown.json(),
    })
  })

  it('cannot confirm a pending upload of another organization, even after its bytes arrived', async () => {
    const owner = await tenant()
    const upload = await initiated(t.app, owner.session, { resourceId: owner.resourceId })
    await putBytes(upload, 'bytes')
    const intruder = await tenant()
    expectProblem(await confirm(t.app, intruder.session, upload.fileId), 404, 'NOT_FOUND')
    const row = await t.app.db
      .selectFrom('files')
      .select('status')
      .where('id', '=', upload.fileId)
      .executeTakeFirst()
    expect(row?.status).toBe('PENDING')
  })
})

describe('API keys', () => {
  it('answers 403 INSUFFICIENT_SCOPE without files:write to initiate and confirm, and without files:read to read', async () => {
    const owner = await tenant()
    const upload = await confirmedFile(owner)
    const reader = (await apiKey(owner.organizationId, ['files:read'])).headers
    const body = initiateBody({ resourceId: owner.resourceId, fileName: 'a.pdf' })
    expectProblem(await asKey(reader, 'POST', '/api/storage/files', body), 403, 'INSUFFICIENT_SCOPE')
    expectProblem(
      await asKey(reader, 'POST', `/api/storage/files/${upload.fileId}/confirm`),
      403,
      'INSUFFICIENT_SCOPE',
    )
    // files:read is enough to read.
    const list = await asKey(reader, 'GET', filesOfUrl(owner.resourceId))
    expect(list.statusCode).toBe(200)
    expect(list.json().items).toHaveLength(1)
    expect((await asKey(reader, 'GET', `/api/storage/files/${upload.fileId}/download-url`)).statusCode).toBe(
      200,
    )

    const writerOnly = (await apiKey(owner.organizationId, ['purchase_requests:write'])).headers
    expectProblem(
      await asKey(writerOnly, 'GET', `/api/storage/files/${upload.fileId}/download-url`),
      403,
      'INSUFFICIENT_SCOPE',
    )
  })

  it('uploads with files:read and files:write in its own organization', async () => {
    const owner = await tenant()
    const { id: keyId, headers: key } = await apiKey(owner.organizationId, ['files:read', 'files:write'])
    const body = initiateBody({ resourceId: owner.resourceId, fileName: 'feed.csv', contentType: 'text/csv' })
    const started = await asKey(key, 'POST', '/api/storage/files', body)
    expect(started.statusCode).toBe(201)
    const upload = started.json() as Upload
    expect((await putBytes(upload, 'a,b\n1,2\n')).status).toBe(200)
    const confirmed = await asKey(key, 'POST', `/api/storage/files/${upload.fileId}/confirm`)
    expect(confirmed.statusCode).toBe(200)
    expect(confirmed.json()).toMatchObject({ status: 'CONFIRMED', sizeBytes: 8 })
    const row = await t.app.db
      .selectFrom('files')
      .select('created_by')
      .where('id', '=', upload.fileId)
      .executeTakeFirst()
    expect(row?.created_by).toBe(keyId)
    // The owner's users see what the key uploaded.
    expect((await listFiles(t.app, owner.session, owner.resourceId)).json().items).toHaveLength(1)
  })

  it('of another organization, with every scope, reaches neither the resource nor its files', async () => {
    const owner = await tenant()
    const upload = await confirmedFile(owner)
    const intruder = await tenant()
    const key = (await apiKey(intruder.organizationId, ['files:read', 'files:write'])).headers
    const body = initiateBody({ resourceId: owner.resourceId, fileName: 'a.pdf' })
    expectProblem(await asKey(key, 'POST', '/api/storage/files', body), 403, 'ACCESS_DENIED')
    expectProblem(await asKey(key, 'POST', `/api/storage/files/${upload.fileId}/confirm`), 404, 'NOT_FOUND')
    expectProblem(
      await asKey(key, 'GET', `/api/storage/files/${upload.fileId}/download-url`),
      404,
      'NOT_FOUND',
    )
    expectProblem(await asKey(key, 'GET', filesOfUrl(owner.resourceId)), 403, 'ACCESS_DENIED')
  })
})

describe('service accounts', () => {
  it('are refused with 403 ORGANIZATION_REQUIRED: files belong to an organization', async () => {
    const owner = await tenant()
    const account = await t.app.services.serviceAccounts.create({
      clientId: `files-${randomUUID()}`,
      description: 'backend',
      scopes: ['files:read', 'files:write'],
    })
    const token = await t.app.services.serviceAccounts.issueToken(account.clientId, account.clientSecret)
    const headers = { authorization: `Bearer ${token.token}` }
    const body = initiateBody({ resourceId: owner.resourceId, fileName: 'a.pdf' })
    expectProblem(await asKey(headers, 'POST', '/api/storage/files', body), 403, 'ORGANIZATION_REQUIRED')
    expectProblem(await asKey(headers, 'GET', filesOfUrl(owner.resourceId)), 403, 'ORGANIZATION_REQUIRED')
  })
})
