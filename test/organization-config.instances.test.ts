import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openPostgres } from '../src/db/database.ts'
import { LISTEN_LOST, LISTEN_RESET } from '../src/db/notifications.ts'
import { APPROVAL_EMAIL_SUBJECT_KEY } from '../src/features/purchase-requests/approval.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, type Session, signIn } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from './helpers/database.ts'

// Several instances on one database behave as one. Instance A caches an
// organization's configuration; instance B changes it over HTTP; A serves the new value as soon
// as B's commit notification reaches it, never the cached one. On PostgreSQL the instances have
// a pool and a LISTEN connection each; on PGlite they share the one embedded session.
//
// Waiting is deterministic: a test registers for A's next change event before B writes, and
// awaits it. Every write by B is awaited this way, so no older notification is still in flight.

const KEY = 'ui.banner'

let shared: TestDatabase
let secondHandle: TestDatabase
let a: TestApp
let b: TestApp
let orgId: string
let adminOnB: Session

/** Resolves at the next change A applies that satisfies `matches` (registered before the write). */
function nextChange(app: TestApp['app'], matches: (organizationId: string | null) => boolean): Promise<void> {
  return new Promise((resolve) => {
    const off = app.services.orgConfig.onChange((organizationId) => {
      if (!matches(organizationId)) return
      off()
      resolve()
    })
  })
}

const changeOf = (app: TestApp['app'], organizationId: string) =>
  nextChange(app, (changed) => changed === organizationId)

async function putOnB(value: string) {
  const res = await asUser(b.app, adminOnB, {
    method: 'PUT',
    url: `/api/organizations/${orgId}/config/${KEY}`,
    payload: { value },
  })
  expect(res.statusCode).toBe(200)
}

async function deleteOnB() {
  const res = await asUser(b.app, adminOnB, {
    method: 'DELETE',
    url: `/api/organizations/${orgId}/config/${KEY}`,
  })
  expect(res.statusCode).toBe(204)
}

/** Changes the row behind the service's back: no notification, as if one had been missed. */
async function changeWithoutNotification(value: string) {
  await shared.handle.db
    .updateTable('organization_config')
    .set({ value })
    .where('organization_id', '=', orgId)
    .where('key', '=', KEY)
    .execute()
}

beforeAll(async () => {
  shared = await createTestDatabase()
  const url = shared.url
  // PostgreSQL: a second pool on the same database, as a second process would have. PGlite is one
  // in-process session, which both instances share.
  if (url) {
    const handle = openPostgres(url, { poolSize: 5 })
    secondHandle = { handle, url, dispose: () => handle.close() }
  } else {
    secondHandle = shared
  }
  a = await createTestApp({ database: shared, config: ACCOUNT_TEST_CONFIG })
  b = await createTestApp({ database: secondHandle, config: ACCOUNT_TEST_CONFIG })
  const admin = await newUser(b.app, { role: 'admin' })
  while ((await b.app.authz.outbox.runOnce()) > 0) {}
  orgId = admin.organizationId
  adminOnB = await signIn(b.app, admin)
})

afterAll(async () => {
  await a?.close()
  await b?.close()
  if (secondHandle && secondHandle !== shared) await secondHandle.dispose()
  await shared?.dispose()
})

describe('organization configuration across instances', () => {
  it('runs two instances on one database', async () => {
    expect(a.app.services.orgConfig.listening).toBe(true)
    expect(b.app.services.orgConfig.listening).toBe(true)
    if (usingPostgres()) {
      expect(secondHandle.handle).not.toBe(shared.handle)
      const { rows } = await sql<{ count: string }>`
        select count(*) as count from pg_stat_activity
        where datname = current_database() and application_name = 'platform-core-listen'`.execute(
        shared.handle.db,
      )
      expect(rows[0]?.count).toBe('2')
    }
  })

  it("shows B's change on A at once, although A had the old value cached", async () => {
    let changed = changeOf(a.app, orgId)
    await putOnB('first')
    await changed
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('first')

    // A serves from its cache: a change that sends no notification is not seen.
    await changeWithoutNotification('unannounced')
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('first')

    changed = changeOf(a.app, orgId)
    await putOnB('second')
    await changed
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('second')
  })

  it("shows B's delete on A at once", async () => {
    let changed = changeOf(a.app, orgId)
    await putOnB('to be removed')
    await changed
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('to be removed')

    changed = changeOf(a.app, orgId)
    await deleteOnB()
    await changed
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBeUndefined()
    // And the absence is cached too, until the next change.
    const reappeared = changeOf(a.app, orgId)
    await putOnB('back')
    await reappeared
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('back')
  })

  it("renders A's approval email with the subject B just configured", async () => {
    const render = () =>
      a.app.mail.templates.render('purchase_request_approved', { title: 'Chairs' }, { organizationId: orgId })
    expect((await render()).subject).toBe('Purchase request approved: Chairs')

    const changed = changeOf(a.app, orgId)
    const res = await asUser(b.app, adminOnB, {
      method: 'PUT',
      url: `/api/organizations/${orgId}/config/${APPROVAL_EMAIL_SUBJECT_KEY}`,
      payload: { value: 'Approved: {title}\r\nBcc: x@y' },
    })
    expect(res.statusCode).toBe(200)
    await changed
    const subject = (await render()).subject
    expect(subject).toBe('Approved: Chairs Bcc: x@y')
    expect(subject).not.toMatch(/[\r\n]/)
  })

  it('does not cache a read that a change notification overtook', async () => {
    const changed = changeOf(a.app, orgId)
    await putOnB('read in flight')
    await changed
    // The read starts, then a notification arrives before its result: that result may be older
    // than the change, so it is returned but not kept.
    const inFlight = a.app.services.orgConfig.getValue(orgId, KEY)
    a.app.services.orgConfig.applyNotification(orgId)
    expect(await inFlight).toBe('read in flight')
    await changeWithoutNotification('read afterwards')
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('read afterwards')
  })

  it('drops its cache while notifications are interrupted, and caches again once they flow', async () => {
    let changed = changeOf(a.app, orgId)
    await putOnB('before the outage')
    await changed
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('before the outage')

    const lost = nextChange(a.app, () => !a.app.services.orgConfig.listening)
    const back = nextChange(a.app, () => a.app.services.orgConfig.listening)
    if (usingPostgres()) {
      // Kill the LISTEN connections: each instance reconnects by itself.
      await sql`select pg_terminate_backend(pid) from pg_stat_activity
        where datname = current_database() and application_name = 'platform-core-listen'`.execute(
        shared.handle.db,
      )
    } else {
      // The embedded session cannot be lost; deliver the signals the PostgreSQL listener sends.
      a.app.services.orgConfig.applyNotification(LISTEN_LOST)
    }
    await lost
    // A change whose notification nobody heard.
    await changeWithoutNotification('during the outage')
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('during the outage')
    if (!usingPostgres()) a.app.services.orgConfig.applyNotification(LISTEN_RESET)
    await back
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('during the outage')

    // Notifications reach A again, over the new connection.
    changed = changeOf(a.app, orgId)
    await putOnB('after the outage')
    await changed
    expect(await a.app.services.orgConfig.getValue(orgId, KEY)).toBe('after the outage')
  })
})
