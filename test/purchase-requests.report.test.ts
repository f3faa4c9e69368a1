import { randomUUID } from 'node:crypto'
import { PDFDocument } from 'pdf-lib'
import { extractText, getDocumentProxy } from 'unpdf'
import { describe, expect, it } from 'vitest'
import type { Role } from '../src/db/schema.ts'
import {
  type PurchaseRequestReportData,
  renderPurchaseRequestReport,
  TITLE_MAX_LINES,
} from '../src/features/purchase-requests/report.ts'
import { type Actor, asUser, expectProblem, newActor } from './helpers/accounts.ts'
import { confirm, downloadUrl, initiated, listFiles, putBytes, useFilesTestApp } from './helpers/files.ts'

// The purchase-request report: POST .../report renders a one-page PDF and
// stores it through the file service as a CONFIRMED attachment of the request, in the same call.
// The PDF is read back through the download address from the real embedded S3 server and its text
// extracted. It needs can_view (a member may generate it, though only can_edit may upload); text
// the embedded font cannot draw (CJK, emoji) shows as '?'.

const t = useFilesTestApp()

const actor = (options: { organizationId?: string; role?: Role } = {}) => newActor(t.app, options)

/** A member who creates requests and an admin (can_edit) of the same organization. */
async function organization(): Promise<{ member: Actor; admin: Actor }> {
  const member = await actor()
  const admin = await actor({ organizationId: member.user.organizationId, role: 'admin' })
  return { member, admin }
}

async function created(who: Actor, title: string): Promise<string> {
  const res = await asUser(t.app, who.session, {
    method: 'POST',
    url: '/api/purchase-requests',
    payload: { title },
  })
  expect(res.statusCode, res.body).toBe(201)
  return res.json().id
}

async function moved(who: Actor, id: string, action: 'submit' | 'approve'): Promise<void> {
  const res = await asUser(t.app, who.session, {
    method: 'POST',
    url: `/api/purchase-requests/${id}/${action}`,
  })
  expect(res.statusCode, res.body).toBe(200)
}

/** Uploads an attachment through the file endpoints (initiate, PUT, confirm); needs can_edit. */
async function attached(who: Actor, id: string, fileName: string): Promise<void> {
  const upload = await initiated(t.app, who.session, { resourceId: id, fileName })
  expect((await putBytes(upload, '%PDF-1.7 a quote')).status).toBe(200)
  expect((await confirm(t.app, who.session, upload.fileId)).statusCode).toBe(200)
}

const report = (who: Actor | null, id: string) =>
  asUser(t.app, who?.session ?? null, { method: 'POST', url: `/api/purchase-requests/${id}/report` })

/** The report's bytes, fetched from the object store through the file's download address. */
async function downloaded(who: Actor, fileId: string): Promise<Uint8Array> {
  const res = await downloadUrl(t.app, who.session, fileId)
  expect(res.statusCode, res.body).toBe(200)
  const download = await fetch(res.json().downloadUrl)
  expect(download.status).toBe(200)
  return new Uint8Array(await download.arrayBuffer())
}

async function textOf(bytes: Uint8Array): Promise<{ text: string; pages: number }> {
  const { text, totalPages } = await extractText(await getDocumentProxy(bytes.slice()), { mergePages: true })
  return { text, pages: totalPages }
}

const reportFilesOf = (id: string) =>
  t.app.db
    .selectFrom('files')
    .selectAll()
    .where('resource_id', '=', id)
    .where('content_type', '=', 'application/pdf')
    .where('original_file_name', '=', `purchase-request-${id}.pdf`)
    .execute()

describe('generating the report', () => {
  it('stores a CONFIRMED PDF attachment and returns its file record with sizeBytes and originalFileName', async () => {
    const { member, admin } = await organization()
    const title = `Ergonomic chairs ${randomUUID().slice(0, 8)}`
    const id = await created(member, title)
    await attached(admin, id, 'quote-acme.pdf')
    await moved(member, id, 'submit')
    await moved(admin, id, 'approve')

    // A member has can_view but not can_edit: enough for the report.
    const res = await report(member, id)

    expect(res.statusCode, res.body).toBe(201)
    const file = res.json()
    expect(res.headers.location).toBe(`/api/storage/files/${file.id}`)
    const now = t.clock.now().toISOString()
    expect(file).toEqual({
      id: expect.any(String),
      fileId: file.id,
      resourceType: 'purchase_request',
      resourceId: id,
      fileName: `purchase-request-${id}.pdf`,
      originalFileName: `purchase-request-${id}.pdf`,
      contentType: 'application/pdf',
      status: 'CONFIRMED',
      sizeBytes: expect.any(Number),
      createdAt: now,
      confirmedAt: now,
    })
    expect(file.sizeBytes).toBeGreaterThan(0)

    // Stored in the same call: the object is in the store with the recorded size.
    const row = await t.app.db
      .selectFrom('files')
      .selectAll()
      .where('id', '=', file.id)
      .executeTakeFirstOrThrow()
    expect(row).toMatchObject({ status: 'CONFIRMED', created_by: member.user.id })
    expect(await t.app.storage.head(row.object_key)).toEqual({
      size: file.sizeBytes,
      contentType: 'application/pdf',
    })

    // Both were stored at the same instant of the test clock: compare without order.
    const listed = await listFiles(t.app, member.session, id)
    const names = listed.json().items.map((f: { originalFileName: string }) => f.originalFileName)
    expect(names.sort()).toEqual([`purchase-request-${id}.pdf`, 'quote-acme.pdf'])

    const bytes = await downloaded(member, file.id)
    expect(bytes.byteLength).toBe(file.sizeBytes)
    expect(Buffer.from(bytes.subarray(0, 5)).toString('latin1')).toBe('%PDF-')
    const { text, pages } = await textOf(bytes)
    expect(pages).toBe(1)
    expect(text).toContain('Purchase request')
    expect(text).toContain(title)
    expect(text).toContain('APPROVED')
    expect(text).toContain(`Creator ${member.user.email}`)
    expect(text).toMatch(/submit DRAFT → SUBMITTED/)
    expect(text).toMatch(/approve SUBMITTED → APPROVED/)
    expect(text).toContain(admin.user.email)
    expect(text).toContain('quote-acme.pdf')
    expect(text).toContain(`Generated at ${now}`)
  })

  it('wraps a 255-character title of words over several lines and keeps every word on one page', async () => {
    const { member } = await organization()
    const vocabulary = ['procurement', 'ergonomic', 'standing', 'desks', 'monitors', 'keyboards', 'docking']
    const words: string[] = []
    for (let i = 0; words.join(' ').length < 245; i++) words.push(`${vocabulary[i % vocabulary.length]}${i}`)
    const title = words.join(' ').padEnd(255, 'x')
    expect(title).toHaveLength(255)
    const id = await created(member, title)

    const res = await report(member, id)

    expect(res.statusCode, res.body).toBe(201)
    const { text, pages } = await textOf(await downloaded(member, res.json().id))
    expect(pages).toBe(1)
    for (const word of title.split(' ')) expect(text).toContain(word)
    const titleLines = text.split('\n').filter((line) => line.includes(vocabulary[0] ?? ''))
    expect(titleLines.length).toBeGreaterThan(1)
    expect(text).not.toContain('…')
  })

  it("draws Greek and Cyrillic as they are and shows '?' for each CJK character and emoji, without failing", async () => {
    const { member, admin } = await organization()
    const id = await created(member, 'Ωmega заказ Καλημέρα 日本 📦 👨‍👩‍👧 café')
    await attached(admin, id, 'смета-αβγ-見積.pdf')

    const res = await report(member, id)

    expect(res.statusCode, res.body).toBe(201)
    const { text } = await textOf(await downloaded(member, res.json().id))
    expect(text).toContain('Ωmega заказ Καλημέρα ?? ? ? café')
    expect(text).toContain('смета-αβγ-??.pdf')
  })

  it('shows the id of a creator that is not an account (an API key with purchase_requests:write)', async () => {
    const { member } = await organization()
    const key = await t.app.services.apiKeys.create({
      organizationId: member.user.organizationId,
      scopes: ['purchase_requests:write'],
      description: 'integration',
      expiresAt: null,
    })
    await t.app.authz.outbox.runOnce()
    const headers = { 'x-api-key': key.rawKey }
    const create = await t.app.inject({
      method: 'POST',
      url: '/api/purchase-requests',
      headers,
      payload: { title: 'Made by a machine' },
    })
    expect(create.statusCode, create.body).toBe(201)
    const id = create.json().id

    const res = await t.app.inject({ method: 'POST', url: `/api/purchase-requests/${id}/report`, headers })

    expect(res.statusCode, res.body).toBe(201)
    const { text } = await textOf(await downloaded(member, res.json().id))
    expect(text).toContain(`Creator ${key.id}`)
    expect(text).toContain('No transitions yet')
    expect(text).toContain('None')
  })
})

describe('who may generate the report', () => {
  it("answers another organization's request with 403 ACCESS_DENIED and stores nothing", async () => {
    const owner = await organization()
    const other = await organization()
    const id = await created(owner.member, 'Not yours')

    expectProblem(await report(other.member, id), 403, 'ACCESS_DENIED')
    expectProblem(await report(other.admin, id), 403, 'ACCESS_DENIED')

    expect(await reportFilesOf(id)).toEqual([])
  })

  it('answers an unknown id with 404 NOT_FOUND', async () => {
    const { member } = await organization()
    expectProblem(await report(member, randomUUID()), 404, 'NOT_FOUND')
  })

  it('answers an API key without purchase_requests:write with 403 INSUFFICIENT_SCOPE and stores nothing', async () => {
    const { member } = await organization()
    const id = await created(member, 'Read-only integration')
    const key = await t.app.services.apiKeys.create({
      organizationId: member.user.organizationId,
      scopes: ['purchase_requests:read', 'files:read', 'files:write'],
      description: 'read-only',
      expiresAt: null,
    })
    await t.app.authz.outbox.runOnce()

    const res = await t.app.inject({
      method: 'POST',
      url: `/api/purchase-requests/${id}/report`,
      headers: { 'x-api-key': key.rawKey },
    })

    expectProblem(res, 403, 'INSUFFICIENT_SCOPE')
    expect(await reportFilesOf(id)).toEqual([])
  })

  it('answers a request without credentials with 401 AUTHENTICATION_REQUIRED', async () => {
    const { member } = await organization()
    const id = await created(member, 'Anonymous')
    expectProblem(await report(null, id), 401, 'AUTHENTICATION_REQUIRED')
    expectProblem(await report(null, randomUUID()), 401, 'AUTHENTICATION_REQUIRED')
    expect(await reportFilesOf(id)).toEqual([])
  })
})

describe('renderPurchaseRequestReport', () => {
  const base: PurchaseRequestReportData = {
    id: '3f6c1b9e-8a2d-4c55-9e1f-0a7b6c5d4e3f',
    title: 'Laptops',
    status: 'SUBMITTED',
    creator: 'creator@example.com',
    createdAt: new Date('2026-01-15T10:00:00.000Z'),
    updatedAt: new Date('2026-01-15T11:00:00.000Z'),
    history: [],
    attachments: [],
    generatedAt: new Date('2026-01-15T12:00:00.000Z'),
  }

  const pageCount = async (bytes: Uint8Array) => (await PDFDocument.load(bytes)).getPageCount()

  it('fits the longest title and 50 history rows on one page, ending the list with "… and N more"', async () => {
    const history = Array.from({ length: 50 }, (_, i) => ({
      action: 'submit',
      fromStatus: 'DRAFT',
      toStatus: 'SUBMITTED',
      actor: `actor-${i}@example.com`,
      occurredAt: new Date(Date.UTC(2026, 0, 15, 10, i)),
    }))
    const attachments = Array.from({ length: 40 }, (_, i) => `quote-${i}.pdf`)

    for (const title of ['W'.repeat(255), 'Wide '.repeat(51).trim()]) {
      const bytes = await renderPurchaseRequestReport({ ...base, title, history, attachments })

      expect(await pageCount(bytes)).toBe(1)
      const { text } = await textOf(bytes)
      const shown = history.filter((entry) => text.includes(`${entry.actor}\n`)).length
      expect(shown).toBeGreaterThan(10)
      expect(text).toContain(`… and ${50 - shown} more`)
      // The first rows are the ones shown.
      expect(text).toContain(`actor-${shown - 1}@example.com`)
      expect(text).not.toContain(`actor-${shown}@example.com`)
      const files = attachments.filter((name) => text.includes(`• ${name}\n`)).length
      expect(text).toContain(`… and ${40 - files} more`)
      expect(text).toContain('Generated at 2026-01-15T12:00:00.000Z')
    }
  })

  it("cuts a title that would need more than six lines with '…'", async () => {
    const bytes = await renderPurchaseRequestReport({ ...base, title: 'W'.repeat(255) })
    const { text } = await textOf(bytes)
    const titleLines = text.split('\n').filter((line) => line.startsWith('W'))
    expect(titleLines).toHaveLength(TITLE_MAX_LINES)
    expect(TITLE_MAX_LINES).toBe(6)
    expect(titleLines.at(-1)).toMatch(/W…$/)
  })

  it('shows every row when they fit, and says so when the lists are empty', async () => {
    const empty = await textOf(await renderPurchaseRequestReport(base))
    expect(empty.text).toContain('No transitions yet')
    expect(empty.text).toContain('Attachments\nNone')
    expect(empty.text).not.toContain('more')

    const full = await textOf(
      await renderPurchaseRequestReport({
        ...base,
        history: [
          {
            action: 'submit',
            fromStatus: 'DRAFT',
            toStatus: 'SUBMITTED',
            actor: 'a@example.com',
            occurredAt: new Date('2026-01-15T10:30:00.000Z'),
          },
        ],
        attachments: ['one.pdf', 'two.pdf'],
      }),
    )
    expect(full.text).toContain('2026-01-15T10:30:00.000Z submit DRAFT → SUBMITTED a@example.com')
    expect(full.text).toContain('• one.pdf\n• two.pdf')
  })

  it('never fails on text outside the font: scripts, combining marks, joiners, lone surrogates', async () => {
    const samples = [
      'مرحبا بالعالم',
      'שלום עולם',
      'नमस्ते दुनिया',
      'สวัสดีชาวโลก',
      'e\u0301le\u0300ve',
      '👩🏽‍💻🏳️‍🌈 ☺️',
      'broken \ud800 surrogate \udfff',
      '中文標題'.repeat(60),
      `${'x'.repeat(300)}`,
    ]
    for (const text of samples) {
      const bytes = await renderPurchaseRequestReport({
        ...base,
        title: text,
        creator: text,
        attachments: [text],
        history: [
          { action: text, fromStatus: text, toStatus: text, actor: text, occurredAt: base.createdAt },
        ],
      })
      expect(await pageCount(bytes)).toBe(1)
    }
    const { text } = await textOf(
      await renderPurchaseRequestReport({ ...base, title: 'e\u0301le\u0300ve 中' }),
    )
    expect(text).toContain('élève ?')
  })
})
