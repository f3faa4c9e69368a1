import { randomUUID } from 'node:crypto'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { type Actor, asUser, expectProblem, newActor, signIn } from './helpers/accounts.ts'
import { initiateBody, newEditor, useFilesTestApp } from './helpers/files.ts'

// Idempotency-Key on the POST creates: a create whose response was lost is retried safely. Purchase
// requests, uploads and invitations.

const t = useFilesTestApp()

const createPr = (who: Actor, body: object, key?: string) =>
  asUser(t.app, who.session, {
    method: 'POST',
    url: '/api/purchase-requests',
    payload: body,
    headers: key === undefined ? {} : { 'idempotency-key': key },
  })

const rows = async (table: string, where: ReturnType<typeof sql>) => {
  const { rows } = await sql<{
    n: string
  }>`select count(*) as n from ${sql.table(table)} where ${where}`.execute(t.app.db)
  return Number(rows[0]?.n)
}

describe('Idempotency-Key', () => {
  it('answers a retry with the first answer, Location included, and creates one purchase request', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const key = randomUUID()
    const first = await createPr(admin, { title: 'Chairs' }, key)
    expect(first.statusCode).toBe(201)
    const retry = await createPr(admin, { title: 'Chairs' }, key)
    expect(retry.statusCode).toBe(201)
    expect(retry.json()).toEqual(first.json())
    expect(retry.headers.location).toBe(first.headers.location)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(first.headers['idempotent-replayed']).toBeUndefined()
    expect(
      await rows(
        'purchase_requests',
        sql`title = 'Chairs' and organization_id = ${admin.user.organizationId}`,
      ),
    ).toBe(1)
  })

  it('makes one resource of 20 parallel copies', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const key = randomUUID()
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => createPr(admin, { title: 'Desks' }, key)),
    )
    expect(answers.map((a) => a.statusCode)).toEqual(Array(20).fill(201))
    expect(new Set(answers.map((a) => a.json().id)).size).toBe(1)
    expect(
      await rows(
        'purchase_requests',
        sql`title = 'Desks' and organization_id = ${admin.user.organizationId}`,
      ),
    ).toBe(1)
    const id = answers[0]?.json().id
    expect(await rows('authz_outbox', sql`object = ${`purchase_request:${id}`}`)).toBe(1)
  })

  it('refuses the same key with another request (409 IDEMPOTENCY_KEY_REUSED), and leaves keys of other callers alone', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const other = await newActor(t.app, { role: 'admin' })
    const key = randomUUID()
    expect((await createPr(admin, { title: 'Lamps' }, key)).statusCode).toBe(201)
    expectProblem(await createPr(admin, { title: 'Other lamps' }, key), 409, 'IDEMPOTENCY_KEY_REUSED')
    // Another caller's key with the same text is another key.
    const theirs = await createPr(other, { title: 'Other lamps' }, key)
    expect(theirs.statusCode).toBe(201)
    expect(theirs.headers['idempotent-replayed']).toBeUndefined()
  })

  it('gives the key back when the request fails, so a corrected retry with it runs', async () => {
    const { session, resourceId } = await newEditor(t.app)
    const key = randomUUID()
    const post = (contentType: string) =>
      asUser(t.app, session, {
        method: 'POST',
        url: '/api/storage/files',
        payload: initiateBody({ resourceId, contentType }),
        headers: { 'idempotency-key': key },
      })
    expectProblem(await post('text/html'), 400, 'UNSUPPORTED_CONTENT_TYPE')
    const created = await post('application/pdf')
    expect(created.statusCode).toBe(201)
    const again = await post('application/pdf')
    expect(again.json().fileId).toBe(created.json().fileId)
    expect(await rows('files', sql`resource_id = ${resourceId}`)).toBe(1)
  })

  it('creates one invitation (one account, one email) for retried invites', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const email = `invitee-${randomUUID()}@example.com`
    const invite = () =>
      asUser(t.app, admin.session, {
        method: 'POST',
        url: '/api/users',
        payload: { email, organizationId: admin.user.organizationId, role: 'member' },
        headers: { 'idempotency-key': 'invite-1' },
      })
    const answers = await Promise.all([invite(), invite(), invite()])
    expect(answers.map((a) => a.statusCode)).toEqual([202, 202, 202])
    expect(new Set(answers.map((a) => a.json().userId)).size).toBe(1)
    expect(await rows('accounts', sql`email = ${email}`)).toBe(1)
    expect(await rows('mail_outbox', sql`recipient = ${email}`)).toBe(1)
  })

  it('refuses a key that is not 1-255 visible ASCII characters', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    for (const key of ['', 'with space', 'ä', 'x'.repeat(256)]) {
      expectProblem(await createPr(admin, { title: 'Bad key' }, key), 400, 'VALIDATION_FAILED')
    }
    expect(await rows('purchase_requests', sql`title = 'Bad key'`)).toBe(0)
  })

  it('forgets a key after 24 hours (retention rule idempotency_keys)', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    // Access tokens last minutes: the same user signs in again at each step.
    const as = async (): Promise<Actor> => ({ user: admin.user, session: await signIn(t.app, admin.user) })
    const key = randomUUID()
    expect((await createPr(admin, { title: 'Monitors' }, key)).statusCode).toBe(201)
    t.clock.advanceSeconds(23 * 3600)
    await t.app.housekeeping.runOnce()
    expectProblem(await createPr(await as(), { title: 'Keyboards' }, key), 409, 'IDEMPOTENCY_KEY_REUSED')
    t.clock.advanceSeconds(3600 + 1)
    await t.app.housekeeping.runOnce()
    expect(await rows('idempotency_keys', sql`key = ${key}`)).toBe(0)
    expect((await createPr(await as(), { title: 'Keyboards' }, key)).statusCode).toBe(201)
  })

  it('documents the header and the 409 on the three creates', async () => {
    const document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    for (const [path, method] of [
      ['/api/purchase-requests', 'post'],
      ['/api/storage/files', 'post'],
      ['/api/users', 'post'],
    ] as const) {
      const operation = document.paths[path][method]
      expect(operation.parameters, path).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ name: 'idempotency-key', in: 'header', required: false }),
        ]),
      )
      expect(operation.responses['409'], path).toBeDefined()
    }
  })
})
