import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runWithTenant } from '../src/context.ts'
import { stagingKey } from '../src/features/files/service.ts'
import type { UserPrincipal } from '../src/principal.ts'
import { sanitizeFileName } from '../src/storage/file-metadata.ts'
import {
  asUser,
  expectProblem,
  newUser,
  refresh,
  type Session,
  sessionOf,
  signIn,
  UUID,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { TestClock } from './helpers/clock.ts'
import {
  confirm,
  downloadUrl,
  initiate,
  initiated,
  listFiles,
  newEditor,
  ownedResource,
  putBytes,
  useFilesTestApp,
} from './helpers/files.ts'

// The upload sequence over real HTTP against the embedded S3 server, which verifies
// signatures: initiate, PUT straight to the store, confirm, download. What the store refuses (a
// Content-Type other than the signed one, a changed signature, an expired address), the file
// lifecycle (PENDING, CONFIRMED, REJECTED over the size limit), and what a client cannot steer
// (object keys, file names, media types).

const t = useFilesTestApp()

const editor = () => newEditor(t.app)

const fileRow = (id: string) =>
  t.app.db.selectFrom('files').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

const PDF = '%PDF-1.7\n% not really a PDF, but bytes all the same\n'

describe('the upload sequence', () => {
  it('initiates, uploads straight to the store, confirms with the size, and downloads under the original name', async () => {
    const { session, resourceId, organizationId } = await editor()
    const res = await initiate(t.app, session, {
      resourceId,
      fileName: 'Angebot Müller – Q3 😀.pdf',
      contentType: 'application/pdf',
    })
    expect(res.statusCode).toBe(201)
    const upload = res.json()
    expect(upload).toEqual({
      fileId: expect.stringMatching(UUID),
      uploadUrl: expect.stringMatching(new RegExp(`^${t.s3.endpoint}/${t.s3.bucket}/`)),
      expiresAt: new Date(t.clock.now().getTime() + 15 * 60_000).toISOString(),
      uploadHeaders: { 'Content-Type': 'application/pdf' },
    })
    expect((await fileRow(upload.fileId)).status).toBe('PENDING')
    expect(res.headers.location).toBe(`/api/storage/files/${upload.fileId}`)
    const pending = await asUser(t.app, session, { method: 'GET', url: String(res.headers.location) })
    expect(pending.json()).toMatchObject({ id: upload.fileId, status: 'PENDING', sizeBytes: null })

    const put = await putBytes(upload, PDF)
    expect(put.status).toBe(200)

    const confirmed = await confirm(t.app, session, upload.fileId)
    expect(confirmed.statusCode).toBe(200)
    expect(confirmed.json()).toEqual({
      id: upload.fileId,
      fileId: upload.fileId,
      resourceType: 'purchase_request',
      resourceId,
      fileName: 'Angebot Müller – Q3 😀.pdf',
      originalFileName: 'Angebot Müller – Q3 😀.pdf',
      contentType: 'application/pdf',
      status: 'CONFIRMED',
      sizeBytes: Buffer.byteLength(PDF),
      createdAt: expect.any(String),
      confirmedAt: t.clock.now().toISOString(),
    })
    const record = await asUser(t.app, session, { method: 'GET', url: String(res.headers.location) })
    expect(record.json()).toEqual(confirmed.json())
    expect((await fileRow(upload.fileId)).object_key).toBe(
      `org/${organizationId}/purchase_request/${resourceId}/${upload.fileId}`,
    )

    const link = await downloadUrl(t.app, session, upload.fileId)
    expect(link.statusCode).toBe(200)
    expect(link.json()).toEqual({
      downloadUrl: expect.stringMatching(new RegExp(`^${t.s3.endpoint}/`)),
      expiresAt: new Date(t.clock.now().getTime() + 5 * 60_000).toISOString(),
    })
    const download = await fetch(link.json().downloadUrl)
    expect(download.status).toBe(200)
    expect(await download.text()).toBe(PDF)
    expect(download.headers.get('content-type')).toBe('application/pdf')
    const disposition = download.headers.get('content-disposition') ?? ''
    expect(disposition).toMatch(/^attachment; filename="[\x20-\x7e]+"; filename\*=UTF-8''/)
    const encoded = /filename\*=UTF-8''(.+)$/.exec(disposition)?.[1] ?? ''
    expect(decodeURIComponent(encoded)).toBe('Angebot Müller – Q3 😀.pdf')
  })

  it('answers 409 UPLOAD_NOT_FOUND to a confirm before the bytes arrive, and 200 to the retry after', async () => {
    const { session, resourceId } = await editor()
    const upload = await initiated(t.app, session, { resourceId })
    expectProblem(await confirm(t.app, session, upload.fileId), 409, 'UPLOAD_NOT_FOUND')
    expect((await fileRow(upload.fileId)).status).toBe('PENDING')

    expect((await putBytes(upload, 'late bytes')).status).toBe(200)
    const retry = await confirm(t.app, session, upload.fileId)
    expect(retry.statusCode).toBe(200)
    expect(retry.json()).toMatchObject({ status: 'CONFIRMED', sizeBytes: 10 })
  })

  it('is idempotent: confirming a confirmed file again returns the same record', async () => {
    const { session, resourceId } = await editor()
    const upload = await initiated(t.app, session, { resourceId })
    await putBytes(upload, PDF)
    const first = await confirm(t.app, session, upload.fileId)
    t.clock.advanceSeconds(30)
    const second = await confirm(t.app, session, upload.fileId)
    expect(first.statusCode).toBe(200)
    expect(second.statusCode).toBe(200)
    expect(second.json()).toEqual(first.json())
  })

  it('answers 404 to a confirm or download of an unknown file id', async () => {
    const { session } = await editor()
    expectProblem(await confirm(t.app, session, randomUUID()), 404, 'NOT_FOUND')
    expectProblem(await downloadUrl(t.app, session, randomUUID()), 404, 'NOT_FOUND')
  })

  it('hands out no download address before the file is confirmed', async () => {
    const { session, resourceId } = await editor()
    const upload = await initiated(t.app, session, { resourceId })
    await putBytes(upload, PDF)
    expectProblem(await downloadUrl(t.app, session, upload.fileId), 404, 'NOT_FOUND')
  })
})

describe('what the store refuses', () => {
  it('refuses a PUT with another Content-Type than the signed one (SignatureDoesNotMatch)', async () => {
    const { session, resourceId } = await editor()
    const upload = await initiated(t.app, session, { resourceId, contentType: 'image/png' })
    const res = await putBytes(upload, '<script>alert(1)</script>', { 'Content-Type': 'text/html' })
    expect(res.status).toBe(403)
    expect(await res.text()).toContain('<Code>SignatureDoesNotMatch</Code>')
    expectProblem(await confirm(t.app, session, upload.fileId), 409, 'UPLOAD_NOT_FOUND')
  })

  it('refuses a changed signature, and the signature used for another key', async () => {
    const { session, resourceId } = await editor()
    const upload = await initiated(t.app, session, { resourceId })
    const tampered = new URL(upload.uploadUrl)
    const signature = tampered.searchParams.get('X-Amz-Signature') ?? ''
    tampered.searchParams.set(
      'X-Amz-Signature',
      `${signature.slice(0, -1)}${signature.endsWith('0') ? '1' : '0'}`,
    )
    const changed = await fetch(tampered, { method: 'PUT', headers: upload.uploadHeaders, body: PDF })
    expect(changed.status).toBe(403)
    expect(await changed.text()).toContain('<Code>SignatureDoesNotMatch</Code>')

    const elsewhere = new URL(upload.uploadUrl)
    elsewhere.pathname = elsewhere.pathname.replace(upload.fileId, randomUUID())
    const moved = await fetch(elsewhere, { method: 'PUT', headers: upload.uploadHeaders, body: PDF })
    expect(moved.status).toBe(403)
    expect(await moved.text()).toContain('<Code>SignatureDoesNotMatch</Code>')
    expectProblem(await confirm(t.app, session, upload.fileId), 409, 'UPLOAD_NOT_FOUND')
  })

  it('refuses an expired upload address', async () => {
    // The store checks expiry against real time: sign an address whose 15 minutes ended an hour ago
    // (signed in at that time too: a token issued later would lie in the future).
    t.clock.advanceSeconds(-75 * 60)
    let upload: Awaited<ReturnType<typeof initiated>>
    let earlier: Session
    try {
      const { session, resourceId } = await editor()
      earlier = session
      upload = await initiated(t.app, session, { resourceId })
    } finally {
      t.clock.advanceSeconds(75 * 60)
    }
    // The access token of an hour ago has expired; the refresh token still names the session.
    const session = sessionOf(await refresh(t.app, earlier))
    expect(new Date(upload.expiresAt).getTime()).toBeLessThan(Date.now())
    const res = await putBytes(upload, PDF)
    expect(res.status).toBe(403)
    expect(await res.text()).toMatch(/<Code>AccessDenied<\/Code><Message>Request has expired/)
    expectProblem(await confirm(t.app, session, upload.fileId), 409, 'UPLOAD_NOT_FOUND')
  })
})

describe('what a client cannot steer', () => {
  it('keys objects by ids only: a hostile file name neither reaches the key nor survives unsanitized', async () => {
    const { session, resourceId, organizationId } = await editor()
    const hostile = '../../etc/passwd'
    const upload = await initiated(t.app, session, {
      resourceId,
      fileName: hostile,
      contentType: 'text/plain',
    })
    const row = await fileRow(upload.fileId)
    expect(row.object_key).toBe(`org/${organizationId}/purchase_request/${resourceId}/${upload.fileId}`)
    // The upload address names the staging key; only a confirm copies the bytes to the file's key.
    expect(new URL(upload.uploadUrl).pathname).toBe(`/${t.s3.bucket}/uploads/${row.object_key}`)
    expect(row.original_file_name).toBe('passwd')

    const nasty = 'C:\\Users\\eve\\in"voice"\u0000\r\nX-Injected: 1\u202egpj.exe'
    const second = await initiated(t.app, session, { resourceId, fileName: nasty, contentType: 'text/plain' })
    await putBytes(second, 'x')
    const record = (await confirm(t.app, session, second.fileId)).json()
    expect(record.originalFileName).toBe('invoiceX-Injected: 1gpj.exe')
    const download = await fetch((await downloadUrl(t.app, session, second.fileId)).json().downloadUrl)
    expect(download.status).toBe(200)
    expect(download.headers.get('content-disposition')).toBe(
      `attachment; filename="invoiceX-Injected: 1gpj.exe"; filename*=UTF-8''invoiceX-Injected%3A%201gpj.exe`,
    )
    expect(download.headers.get('x-injected')).toBeNull()
  })

  it('sanitizes file names for display: last path segment, no controls or quotes, Unicode kept, 255 characters', () => {
    expect(sanitizeFileName('../../etc/passwd')).toBe('passwd')
    expect(sanitizeFileName('..\\..\\windows\\win.ini')).toBe('win.ini')
    expect(sanitizeFileName('..')).toBe('file')
    expect(sanitizeFileName('  \t\n ')).toBe('file')
    expect(sanitizeFileName('report.pdf. . ')).toBe('report.pdf')
    expect(sanitizeFileName('say "hi"\u0007.txt')).toBe('say hi.txt')
    expect(sanitizeFileName('Cafe\u0301 – 東京.pdf')).toBe('Café – 東京.pdf')
    expect(sanitizeFileName('a\u202eexe.pdf')).toBe('aexe.pdf')
    const long = sanitizeFileName(`${'ä'.repeat(400)}.docx`)
    expect([...long]).toHaveLength(255)
    expect(long.endsWith('ä.docx')).toBe(true)
  })

  it.each([
    ['a bare word', 'pdf'],
    ['a wildcard', 'text/*'],
    ['a parameter other than charset', 'text/plain; format=flowed'],
    ['two parameters', 'text/plain; charset=utf-8; charset=latin1'],
    ['an empty parameter', 'text/plain;'],
    ['a header injection', 'text/plain\r\nx-amz-acl: public-read'],
    ['spaces inside the type', 'text / plain'],
  ])('answers 400 VALIDATION_FAILED to a content type that is %s', async (_case, contentType) => {
    const { session, resourceId } = await editor()
    const res = await initiate(t.app, session, { resourceId, contentType })
    expectProblem(res, 400, 'VALIDATION_FAILED')
    expect(res.json().errors).toEqual([{ path: 'body.contentType', message: expect.any(String) }])
    expect(
      await t.app.db.selectFrom('files').select('id').where('resource_id', '=', resourceId).execute(),
    ).toEqual([])
  })

  it('signs the canonical form of a content type with a charset, which the client sends back', async () => {
    const { session, resourceId } = await editor()
    const upload = await initiated(t.app, session, { resourceId, contentType: 'Text/Plain ; Charset=UTF-8' })
    expect(upload.uploadHeaders).toEqual({ 'Content-Type': 'text/plain; charset=utf-8' })
    expect((await putBytes(upload, 'grüße')).status).toBe(200)
    const record = (await confirm(t.app, session, upload.fileId)).json()
    expect(record).toMatchObject({ contentType: 'text/plain; charset=utf-8', sizeBytes: 7 })
  })

  it('answers 400 UNSUPPORTED_CONTENT_TYPE to a media type the resource type does not accept, and records nothing', async () => {
    const { session, resourceId } = await editor()
    for (const contentType of ['text/html', 'application/x-msdownload', 'image/svg+xml']) {
      const res = await initiate(t.app, session, { resourceId, fileName: 'page.html', contentType })
      expectProblem(res, 400, 'UNSUPPORTED_CONTENT_TYPE')
      expect(res.json().errors).toEqual([{ path: 'body.contentType', message: expect.any(String) }])
    }
    expect(
      await t.app.db.selectFrom('files').select('id').where('resource_id', '=', resourceId).execute(),
    ).toEqual([])
  })

  it('answers 400 to an unregistered resource type and to a resource id that is not a UUID', async () => {
    const { session, resourceId } = await editor()
    const unknown = await initiate(t.app, session, { resourceType: 'invoice', resourceId })
    expectProblem(unknown, 400, 'VALIDATION_FAILED')
    expect(unknown.json().errors).toEqual([{ path: 'body.resourceType', message: expect.any(String) }])
    expectProblem(await initiate(t.app, session, { resourceId: '../other-org' }), 400, 'VALIDATION_FAILED')
    const list = await t.app.inject({
      method: 'GET',
      url: `/api/storage/files?resourceType=invoice&resourceId=${resourceId}`,
      cookies: { access_token: session.access },
    })
    expectProblem(list, 400, 'VALIDATION_FAILED')
  })
})

describe('listing a resource', () => {
  it("lists only the resource's confirmed files, oldest first", async () => {
    const { session, resourceId } = await editor()
    const first = await initiated(t.app, session, { resourceId, fileName: 'first.pdf' })
    await putBytes(first, PDF)
    await confirm(t.app, session, first.fileId)
    t.clock.advanceSeconds(1)
    const second = await initiated(t.app, session, { resourceId, fileName: 'second.pdf' })
    await putBytes(second, PDF)
    await confirm(t.app, session, second.fileId)
    const uploadedNotConfirmed = await initiated(t.app, session, { resourceId, fileName: 'pending.pdf' })
    await putBytes(uploadedNotConfirmed, PDF)
    await initiated(t.app, session, { resourceId, fileName: 'never-uploaded.pdf' })
    const other = await ownedResource(t.app, (await fileRow(first.fileId)).organization_id)
    const elsewhere = await initiated(t.app, session, { resourceId: other, fileName: 'other.pdf' })
    await putBytes(elsewhere, PDF)
    await confirm(t.app, session, elsewhere.fileId)

    const res = await listFiles(t.app, session, resourceId)
    expect(res.statusCode).toBe(200)
    expect(res.json().items.map((f: { fileName: string; status: string }) => [f.fileName, f.status])).toEqual(
      [
        ['first.pdf', 'CONFIRMED'],
        ['second.pdf', 'CONFIRMED'],
      ],
    )
    const empty = await listFiles(
      t.app,
      session,
      await ownedResource(t.app, (await fileRow(first.fileId)).organization_id),
    )
    expect(empty.json()).toEqual({ items: [] })
  })
})

describe('members and admins', () => {
  it('lets a member view and download, and refuses them uploads (can_edit is for admins)', async () => {
    const owner = await editor()
    const upload = await initiated(t.app, owner.session, { resourceId: owner.resourceId })
    await putBytes(upload, PDF)
    await confirm(t.app, owner.session, upload.fileId)

    const member = await newUser(t.app, { organizationId: owner.organizationId, role: 'member' })
    await t.app.authz.outbox.runOnce()
    const session = await signIn(t.app, member)
    expect((await listFiles(t.app, session, owner.resourceId)).json().items).toHaveLength(1)
    expect((await downloadUrl(t.app, session, upload.fileId)).statusCode).toBe(200)
    expectProblem(await initiate(t.app, session, { resourceId: owner.resourceId }), 403, 'ACCESS_DENIED')
    expectProblem(await confirm(t.app, session, upload.fileId), 403, 'ACCESS_DENIED')
  })

  it('refuses an upload to a resource without an owner tuple, even to an admin', async () => {
    const { session } = await editor()
    expectProblem(await initiate(t.app, session, { resourceId: randomUUID() }), 403, 'ACCESS_DENIED')
  })

  it('answers 401 to every file route without credentials', async () => {
    const id = randomUUID()
    for (const res of [
      await initiate(t.app, null, { resourceId: id }),
      await confirm(t.app, null, id),
      await downloadUrl(t.app, null, id),
      await listFiles(t.app, null, id),
    ]) {
      expectProblem(res, 401, 'AUTHENTICATION_REQUIRED')
    }
  })
})

describe('files the service stores itself', () => {
  it('stores generated bytes as a CONFIRMED file that downloads like an upload', async () => {
    const { session, resourceId, organizationId, userId } = await editor()
    const principal: UserPrincipal = {
      type: 'USER',
      id: userId,
      userId,
      organizationId,
      sessionId: session.sessionId,
    }
    const bytes = new TextEncoder().encode('%PDF-1.7 report')
    const row = await runWithTenant(organizationId, () =>
      t.app.services.files.storeGenerated(principal, {
        resourceType: 'purchase_request',
        resourceId,
        fileName: 'Purchase request report.pdf',
        contentType: 'application/pdf',
        bytes,
      }),
    )
    expect(row).toMatchObject({
      status: 'CONFIRMED',
      size_bytes: String(bytes.byteLength),
      created_by: userId,
    })
    expect(await t.app.storage.head(row.object_key)).toEqual({
      size: bytes.byteLength,
      contentType: 'application/pdf',
    })
    const download = await fetch((await downloadUrl(t.app, session, row.id)).json().downloadUrl)
    expect(new Uint8Array(await download.arrayBuffer())).toEqual(bytes)
    expect((await listFiles(t.app, session, resourceId)).json().items).toHaveLength(1)
  })
})

describe('readiness', () => {
  it('reports the storage check as UP while the bucket answers', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expect(res.statusCode).toBe(200)
    expect(res.json().checks).toMatchObject({ storage: 'UP' })
  })
})

describe('over the size limit (platform.storage.max-file-size=10)', () => {
  let small: TestApp
  beforeAll(async () => {
    small = await createTestApp({
      clock: new TestClock(new Date()),
      config: {
        ...t.s3.config,
        'platform.storage.max-file-size': '10',
        'platform.auth.password.hash-memory-kib': '1024',
        'platform.auth.password.hash-iterations': '1',
      },
    })
  })
  afterAll(async () => {
    await small?.close()
  })

  const smallEditor = () => newEditor(small.app)

  it('refuses a file of 11 bytes at confirm, deletes the object and marks the file REJECTED', async () => {
    const { session, resourceId } = await smallEditor()
    const upload = await initiated(small.app, session, { resourceId, contentType: 'text/plain' })
    expect((await putBytes(upload, '01234567890')).status).toBe(200)
    expectProblem(await confirm(small.app, session, upload.fileId), 413, 'PAYLOAD_TOO_LARGE')
    const row = await small.app.db
      .selectFrom('files')
      .selectAll()
      .where('id', '=', upload.fileId)
      .executeTakeFirstOrThrow()
    expect(row).toMatchObject({ status: 'REJECTED', size_bytes: '11', confirmed_at: null })
    expect(await small.app.storage.head(row.object_key)).toBeNull()
    expect(await small.app.storage.head(stagingKey(row.object_key))).toBeNull()
    // Final: the retry gets the same answer, and the file is neither listed nor downloadable.
    expectProblem(await confirm(small.app, session, upload.fileId), 413, 'PAYLOAD_TOO_LARGE')
    expect((await listFiles(small.app, session, resourceId)).json()).toEqual({ items: [] })
    expectProblem(await downloadUrl(small.app, session, upload.fileId), 404, 'NOT_FOUND')
  })

  it('keeps a confirmed file as confirmed when the upload address is used again before it expires', async () => {
    const { session, resourceId } = await smallEditor()
    const upload = await initiated(small.app, session, { resourceId, contentType: 'text/plain' })
    expect((await putBytes(upload, 'confirmed!')).status).toBe(200)
    const first = await confirm(small.app, session, upload.fileId)
    expect(first.json()).toMatchObject({ status: 'CONFIRMED', sizeBytes: 10 })
    // The address is still valid: the store takes the new bytes, but they land on the staging key.
    expect((await putBytes(upload, 'a much larger replacement, over the limit')).status).toBe(200)
    const again = await confirm(small.app, session, upload.fileId)
    expect(again.json()).toEqual(first.json())
    const download = await fetch((await downloadUrl(small.app, session, upload.fileId)).json().downloadUrl)
    expect(await download.text()).toBe('confirmed!')
    const row = await small.app.db
      .selectFrom('files')
      .selectAll()
      .where('id', '=', upload.fileId)
      .executeTakeFirstOrThrow()
    expect(await small.app.storage.head(row.object_key)).toMatchObject({ size: 10 })
  })

  it('accepts a file of exactly the limit', async () => {
    const { session, resourceId } = await smallEditor()
    const upload = await initiated(small.app, session, { resourceId, contentType: 'text/plain' })
    await putBytes(upload, '0123456789')
    const res = await confirm(small.app, session, upload.fileId)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ status: 'CONFIRMED', sizeBytes: 10 })
  })
})

describe('uploads nobody confirms (retention rule `files`)', () => {
  let app: TestApp
  beforeAll(async () => {
    app = await createTestApp({
      clock: new TestClock(new Date()),
      config: {
        ...t.s3.config,
        'platform.storage.max-file-size': '10',
        'platform.retention.pending-uploads': '1h',
        'platform.auth.password.hash-memory-kib': '1024',
        'platform.auth.password.hash-iterations': '1',
      },
    })
  })
  afterAll(async () => {
    await app?.close()
  })

  const row = (id: string) =>
    app.app.db.selectFrom('files').selectAll().where('id', '=', id).executeTakeFirst()

  it('removes PENDING and REJECTED files with their bytes an hour after their address expired, and keeps confirmed ones', async () => {
    const { session, resourceId } = await newEditor(app.app)
    const staged = await initiated(app.app, session, { resourceId, contentType: 'text/plain' })
    await putBytes(staged, 'abandoned')
    const never = await initiated(app.app, session, { resourceId, contentType: 'text/plain' })
    const refused = await initiated(app.app, session, { resourceId, contentType: 'text/plain' })
    await putBytes(refused, 'eleven byte')
    expectProblem(await confirm(app.app, session, refused.fileId), 413, 'PAYLOAD_TOO_LARGE')
    const kept = await initiated(app.app, session, { resourceId, contentType: 'text/plain' })
    await putBytes(kept, 'kept')
    expect((await confirm(app.app, session, kept.fileId)).statusCode).toBe(200)
    const stagedKey = (await row(staged.fileId))?.object_key ?? ''
    expect(await app.app.storage.head(stagingKey(stagedKey))).toMatchObject({ size: 9 })

    // 15 minutes of upload address and the hour of grace, less ten seconds: everything stays.
    app.clock.advanceSeconds(15 * 60 + 3600 - 10)
    expect((await app.app.housekeeping.runOnce()).files).toBe(0)
    expect(await row(never.fileId)).toMatchObject({ status: 'PENDING' })

    app.clock.advanceSeconds(20)
    expect((await app.app.housekeeping.runOnce()).files).toBe(3)
    for (const id of [staged.fileId, never.fileId, refused.fileId]) expect(await row(id)).toBeUndefined()
    expect(await app.app.storage.head(stagingKey(stagedKey))).toBeNull()
    const confirmed = await row(kept.fileId)
    expect(confirmed).toMatchObject({ status: 'CONFIRMED' })
    expect(await app.app.storage.head(confirmed?.object_key ?? '')).toMatchObject({ size: 4 })
  })
})
