import type { KyselyPlugin, RootOperationNode } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { CheckRequest } from '../src/authz/port.ts'
import { currentRequestOrigin } from '../src/context.ts'
import { ACCOUNT_TEST_CONFIG, type Actor, asUser, newActor, newUser } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { SwitchablePort, switchableTestPort } from './helpers/authz.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// What one report costs does not grow with its history: the accounts named in it are read in one
// statement whatever their number, and `can_view` on the request is asked once (the attachment
// list of a request the report has just checked asks nothing again). The port here is only asked
// (an authorization server), so that every question it gets is counted.

/**
 * Counts the statements the app runs while serving a request (not what runs beside it, as the audit
 * chainer a commit nudged), and those that read the accounts table.
 */
class StatementCounter implements KyselyPlugin {
  statements = 0
  accountReads = 0
  transformQuery: KyselyPlugin['transformQuery'] = (args) => {
    if (args.node.kind === 'SelectQueryNode' && readsAccounts(args.node)) this.accountReads++
    return args.node
  }
  transformResult: KyselyPlugin['transformResult'] = async (args) => {
    if (currentRequestOrigin()) this.statements++
    return args.result
  }
}

const readsAccounts = (node: RootOperationNode) =>
  JSON.stringify((node as { from?: unknown }).from ?? null).includes('"name":"accounts"')

/** Records every check the port answers. */
class CountingPort extends SwitchablePort {
  readonly checks: CheckRequest[] = []
  override check(request: CheckRequest): Promise<boolean> {
    this.checks.push(request)
    return super.check(request)
  }
}

let database: TestDatabase
let t: TestApp
let port: CountingPort
const counter = new StatementCounter()

beforeAll(async () => {
  database = await createTestDatabase()
  port = new CountingPort((await switchableTestPort(database.handle.db)).inner)
  t = await createTestApp({
    database: { ...database, handle: { ...database.handle, db: database.handle.db.withPlugin(counter) } },
    config: ACCOUNT_TEST_CONFIG,
    deps: { authorization: port },
  })
})

afterAll(async () => {
  await t?.close()
  await port?.close()
  await database?.dispose()
})

/** A submitted request whose history also names `others` more accounts of its organization. */
async function requestWithHistory(creator: Actor, others: number): Promise<string> {
  const created = await asUser(t.app, creator.session, {
    method: 'POST',
    url: '/api/purchase-requests',
    payload: { title: 'Standing desks' },
  })
  expect(created.statusCode).toBe(201)
  const id: string = created.json().id
  await t.app.authz.outbox.runOnce()
  const submitted = await asUser(t.app, creator.session, {
    method: 'POST',
    url: `/api/purchase-requests/${id}/submit`,
  })
  expect(submitted.statusCode).toBe(200)
  const { organizationId } = creator.user
  for (let i = 0; i < others; i++) {
    const account = await newUser(t.app, { organizationId })
    await t.app.db
      .insertInto('purchase_request_events')
      .values({
        organization_id: organizationId,
        purchase_request_id: id,
        action: 'submit',
        from_status: 'DRAFT',
        to_status: 'SUBMITTED',
        actor_id: account.id,
        occurred_at: t.clock.now(),
      })
      .execute()
  }
  return id
}

/** The report of the request, with the statements, account reads and checks it took. */
async function reported(who: Actor, id: string) {
  await t.app.background.idle()
  await t.app.services.auditChainer.idle()
  counter.statements = 0
  counter.accountReads = 0
  port.checks.length = 0
  const res = await asUser(t.app, who.session, { method: 'POST', url: `/api/purchase-requests/${id}/report` })
  expect(res.statusCode, res.body).toBe(201)
  return {
    statements: counter.statements,
    accountReads: counter.accountReads,
    canView: port.checks.filter((check) => check.relation === 'can_view').map((check) => check.object),
  }
}

describe('the purchase-request report', () => {
  it('reads the accounts of its history in one statement and asks can_view on the request once', async () => {
    const creator = await newActor(t.app)
    const short = await requestWithHistory(creator, 0)
    const long = await requestWithHistory(creator, 6)

    const few = await reported(creator, short)
    const many = await reported(creator, long)

    expect(many.accountReads).toBe(1)
    expect(many.statements).toBe(few.statements)
    expect(many.canView).toEqual([`purchase_request:${long}`])
    expect(few.canView).toEqual([`purchase_request:${short}`])
  })
})
