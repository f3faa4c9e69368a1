import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import { describe, expect, it } from 'vitest'
import { insertTuples, type TupleRow } from '../src/authz/tuple-store.ts'
import { asUser, newActor, type Session } from './helpers/accounts.ts'
import { confirm, filesOfUrl, initiated, putBytes, useFilesTestApp } from './helpers/files.ts'

// The organization is in every query of tenant data, not only in the authorization tuples: a tuple
// written by mistake that relates a user of one organization to another organization's purchase
// request (or makes them a member of that organization) gives them nothing of it. Every read
// answers as it did before the tuple was written, no workflow action moves the request, and no
// configuration entry of the other organization is read or changed.

const t = useFilesTestApp()

interface Owner {
  organizationId: string
  session: Session
  requestId: string
  fileId: string
}

/** An organization with a submitted purchase request (one audit row) and a confirmed attachment. */
async function ownerWithRequest(): Promise<Owner> {
  const { user, session } = await newActor(t.app, { role: 'admin' })
  const created = await asUser(t.app, session, {
    method: 'POST',
    url: '/api/purchase-requests',
    payload: { title: 'Confidential hardware' },
  })
  expect(created.statusCode).toBe(201)
  const requestId: string = created.json().id
  const submit = await asUser(t.app, session, {
    method: 'POST',
    url: `/api/purchase-requests/${requestId}/submit`,
  })
  expect(submit.statusCode).toBe(200)
  const upload = await initiated(t.app, session, { resourceId: requestId, fileName: 'secret-quote.pdf' })
  expect((await putBytes(upload, 'confidential')).status).toBe(200)
  expect((await confirm(t.app, session, upload.fileId)).statusCode).toBe(200)
  return { organizationId: user.organizationId, session, requestId, fileId: upload.fileId }
}

/** The reads of another organization's request and file an outsider might try. */
function reads(owner: Owner): [string, InjectOptions][] {
  const request = `/api/purchase-requests/${owner.requestId}`
  return [
    ['GET the request', { method: 'GET', url: request }],
    ['GET its history', { method: 'GET', url: `${request}/history` }],
    ['GET its file', { method: 'GET', url: `/api/storage/files/${owner.fileId}` }],
    ['GET its file download-url', { method: 'GET', url: `/api/storage/files/${owner.fileId}/download-url` }],
  ]
}

const answer = (res: LightMyRequestResponse) => ({ status: res.statusCode, body: res.json() })

/** What the stored request, its audit rows and the files of the request look like. */
async function stored(requestId: string) {
  return {
    request: await t.app.db
      .selectFrom('purchase_requests')
      .selectAll()
      .where('id', '=', requestId)
      .executeTakeFirstOrThrow(),
    events: await t.app.db
      .selectFrom('purchase_request_events')
      .selectAll()
      .where('purchase_request_id', '=', requestId)
      .execute(),
    files: await t.app.db.selectFrom('files').selectAll().where('resource_id', '=', requestId).execute(),
  }
}

const tuple = (
  object: [type: string, id: string],
  relation: string,
  subject: [type: string, id: string],
): TupleRow => ({
  object_type: object[0],
  object_id: object[1],
  relation,
  subject_type: subject[0],
  subject_id: subject[1],
  subject_relation: '',
})

describe.each<[string, (outsider: { userId: string; organizationId: string }, owner: Owner) => TupleRow]>([
  [
    "the outsider's organization as an owner of the request",
    (outsider, owner) =>
      tuple(['purchase_request', owner.requestId], 'owner_organization', [
        'organization',
        outsider.organizationId,
      ]),
  ],
  [
    'the outsider as a member of the other organization',
    (outsider, owner) => tuple(['organization', owner.organizationId], 'member', ['user', outsider.userId]),
  ],
])('a wrong authorization tuple: %s', (_name, wrongTuple) => {
  it("reads nothing of the other organization's request or file, answering as without the tuple", async () => {
    const owner = await ownerWithRequest()
    const { user, session } = await newActor(t.app, { role: 'admin' })
    const before = new Map<string, ReturnType<typeof answer>>()
    for (const [name, request] of reads(owner))
      before.set(name, answer(await asUser(t.app, session, request)))

    await insertTuples(t.app.db, [
      wrongTuple({ userId: user.id, organizationId: user.organizationId }, owner),
    ])
    // The tuple does grant the relation: the defence is the organization in the queries.
    const check = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/authz/check',
      payload: { relation: 'can_view', objectType: 'purchase_request', objectId: owner.requestId },
    })
    expect(check.json()).toEqual({ allowed: true })

    for (const [name, request] of reads(owner)) {
      const res = await asUser(t.app, session, request)
      expect(answer(res), name).toEqual(before.get(name))
      expect([403, 404], name).toContain(res.statusCode)
    }

    // The lists of the outsider's organization leave the request and its file out.
    const list = await asUser(t.app, session, { method: 'GET', url: '/api/purchase-requests?limit=100' })
    expect(list.statusCode).toBe(200)
    expect(list.body).not.toContain(owner.requestId)
    const attachments = await asUser(t.app, session, { method: 'GET', url: filesOfUrl(owner.requestId) })
    expect(attachments.body).not.toContain(owner.fileId)
    expect(attachments.body).not.toContain('secret-quote')
    // The owner still reads everything.
    for (const [name, request] of reads(owner)) {
      expect((await asUser(t.app, owner.session, request)).statusCode, name).toBe(200)
    }
  })

  it("neither moves nor reports on the other organization's request", async () => {
    const owner = await ownerWithRequest()
    const { user, session } = await newActor(t.app, { role: 'admin' })
    await insertTuples(t.app.db, [
      wrongTuple({ userId: user.id, organizationId: user.organizationId }, owner),
    ])
    const before = await stored(owner.requestId)

    const request = `/api/purchase-requests/${owner.requestId}`
    for (const url of [`${request}/approve`, `${request}/submit`, `${request}/report`]) {
      const res = await asUser(t.app, session, { method: 'POST', url })
      expect(res.statusCode, url).toBe(403)
      expect(res.body, url).not.toContain('Confidential hardware')
    }
    expect(await stored(owner.requestId)).toEqual(before)
  })
})

describe('a wrong authorization tuple making a user a member and admin of another organization', () => {
  it("reads and writes none of that organization's configuration, answering as without the tuple", async () => {
    const owner = await newActor(t.app, { role: 'admin' })
    const configUrl = `/api/organizations/${owner.user.organizationId}/config`
    const put = await asUser(t.app, owner.session, {
      method: 'PUT',
      url: `${configUrl}/theme`,
      payload: { value: 'confidential' },
    })
    expect(put.statusCode).toBe(200)
    const { user, session } = await newActor(t.app, { role: 'admin' })
    const attempts: [string, InjectOptions][] = [
      ['list', { method: 'GET', url: configUrl }],
      ['put', { method: 'PUT', url: `${configUrl}/theme`, payload: { value: 'overwritten' } }],
      ['delete', { method: 'DELETE', url: `${configUrl}/theme` }],
    ]
    const before = new Map<string, ReturnType<typeof answer>>()
    for (const [name, request] of attempts) before.set(name, answer(await asUser(t.app, session, request)))

    await insertTuples(
      t.app.db,
      ['member', 'admin'].map((relation) =>
        tuple(['organization', owner.user.organizationId], relation, ['user', user.id]),
      ),
    )
    for (const [name, request] of attempts) {
      const res = await asUser(t.app, session, request)
      expect(answer(res), name).toEqual(before.get(name))
      expect(res.statusCode, name).toBe(403)
    }
    const entries = await asUser(t.app, owner.session, { method: 'GET', url: configUrl })
    expect(entries.json().items).toEqual([expect.objectContaining({ key: 'theme', value: 'confidential' })])
  })
})
