import { randomUUID } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import type { Kysely } from 'kysely'
import { afterAll, beforeAll } from 'vitest'
import { EmbeddedAuthorization } from '../../src/authz/embedded.ts'
import { loadModel, ModelIndex } from '../../src/authz/model.ts'
import type { AuthorizationPort, CheckRequest, TupleKey } from '../../src/authz/port.ts'
import { enqueueTupleChanges, type TupleChange } from '../../src/authz/tuples.ts'
import { inTransaction } from '../../src/db/database.ts'
import type { Database } from '../../src/db/schema.ts'
import { ACCOUNT_TEST_CONFIG } from './accounts.ts'
import { createTestApp, type TestApp, type TestAppOptions } from './app.ts'
import { testAuthorizationPort } from './authz-adapter.ts'
import { createTestDatabase, type TestDatabase } from './database.ts'

// An authorization port tests can break: the adapter under test (the embedded evaluator, or OpenFGA
// with TEST_AUTHZ=openfga) behind a proxy whose operations throw a chosen error while it is set, and
// which records the tuple changes it delivered.

export interface PortFailures {
  check?: Error | undefined
  write?: Error | undefined
  ready?: Error | undefined
}

export class SwitchablePort implements AuthorizationPort {
  readonly inner: AuthorizationPort
  /** Set a member to make that operation throw it; clear it to heal the server. */
  failures: PortFailures = {}
  /** Every write call, failed or not. */
  attempts = 0
  /** The changes delivered, in order: `write|delete user relation object`. */
  readonly delivered: string[] = []

  constructor(inner: AuthorizationPort) {
    this.inner = inner
  }

  async check(request: CheckRequest): Promise<boolean> {
    if (this.failures.check) throw this.failures.check
    return this.inner.check(request)
  }

  async write(writes: TupleKey[], deletes: TupleKey[]): Promise<void> {
    this.attempts++
    if (this.failures.write) throw this.failures.write
    await this.inner.write(writes, deletes)
    for (const tuple of deletes) this.delivered.push(describeChange('delete', tuple))
    for (const tuple of writes) this.delivered.push(describeChange('write', tuple))
  }

  async ready(): Promise<void> {
    if (this.failures.ready) throw this.failures.ready
    await this.inner.ready()
  }

  close(): Promise<void> {
    return this.inner.close()
  }
}

export const describeChange = (operation: 'write' | 'delete', tuple: TupleKey): string =>
  `${operation} ${tuple.user} ${tuple.relation} ${tuple.object}`

/** The embedded evaluator over `db`, behind a switchable proxy. */
export async function switchableEmbeddedPort(db: Kysely<Database>): Promise<SwitchablePort> {
  return new SwitchablePort(new EmbeddedAuthorization(db, new ModelIndex(await loadModel())))
}

/** The adapter under test for an app on `db` (see authz-adapter.ts), behind a switchable proxy. */
export async function switchableTestPort(db: Kysely<Database>): Promise<SwitchablePort> {
  return new SwitchablePort(await testAuthorizationPort(db))
}

export interface AuthzTestApp extends TestApp {
  /** The app's authorization port: the adapter under test, made to fail on demand. */
  port: SwitchablePort
}

/** A test app for the whole file (account test config) whose authorization goes through a switchable port. */
export function useAuthzTestApp(options: Omit<TestAppOptions, 'database'> = {}): AuthzTestApp {
  const holder = {} as AuthzTestApp
  let database: TestDatabase | undefined
  let t: TestApp | undefined
  let port: SwitchablePort | undefined
  beforeAll(async () => {
    database = await createTestDatabase()
    port = await switchableTestPort(database.handle.db)
    t = await createTestApp({
      ...options,
      database,
      config: { ...ACCOUNT_TEST_CONFIG, ...options.config },
      deps: { authorization: port, ...options.deps },
    })
    Object.assign(holder, t, { port })
  })
  afterAll(async () => {
    await t?.close()
    await port?.close()
    await database?.dispose()
  })
  return holder
}

/** The tuple changes queued for a subject (`user:<id>`, `api_key:<id>`), delivered or not, oldest first. */
export function queuedChangesOf(app: FastifyInstance, subject: string) {
  return app.db
    .selectFrom('authz_outbox')
    .select(['operation', 'subject', 'relation', 'object'])
    .where('subject', '=', subject)
    .orderBy('id')
    .execute()
}

/** Queues tuple changes in one transaction, as a service does with the change that causes them. */
export async function queueTupleChanges(app: FastifyInstance, changes: TupleChange[]): Promise<void> {
  await inTransaction(app.db, (trx) => enqueueTupleChanges(trx, changes, app.clock.now()))
}

/** Queues `organization:<org> owner_organization purchase_request:<new id>`; returns the id. */
export async function queueOwnedPurchaseRequest(
  app: FastifyInstance,
  organizationId: string,
): Promise<string> {
  const id = randomUUID()
  await queueTupleChanges(app, [
    {
      operation: 'write',
      subject: `organization:${organizationId}`,
      relation: 'owner_organization',
      object: `purchase_request:${id}`,
    },
  ])
  return id
}

/**
 * Records tuple changes as the service records them (at the app's clock) and delivers the outbox
 * until it is empty: in effect for the authorization port under test when this returns.
 */
export async function applyTupleChanges(app: FastifyInstance, changes: TupleChange[]): Promise<void> {
  await inTransaction(app.db, (trx) => app.authz.tuples.record(trx, changes, app.clock.now()))
  while ((await app.authz.outbox.runOnce()) > 0) {}
}
