import { randomBytes, randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { authzInit, initializeOpenFga, STORE_NAME } from '../src/authz/init.ts'
import { loadModel, parseModel } from '../src/authz/model.ts'
import { createOpenFgaAgents, createOpenFgaClient, OpenFgaAuthorization } from '../src/authz/openfga.ts'
import {
  type AuthorizationPort,
  AuthorizationUnavailableError,
  type CheckRequest,
  type TupleKey,
} from '../src/authz/port.ts'
import { AppError } from '../src/errors.ts'
import { ACCOUNT_TEST_CONFIG, asUser, expectProblem, newActor, newUser, signIn } from './helpers/accounts.ts'
import { createTestAppForTest, type TestApp, testConfig, testSecret } from './helpers/app.ts'
import { queueTupleChanges, SwitchablePort } from './helpers/authz.ts'
import { type OpenFgaServer, openFgaAvailable, startOpenFga } from './helpers/openfga-server.ts'
import { adminQuery, databaseUrl } from './helpers/postgres-admin.ts'
import { runNode } from './helpers/process.ts'

// The OpenFGA adapter, and the service on it, against a real OpenFGA server (the version
// compose.yaml pins, npm run openfga:install): provisioning with `npm run cli -- authz init`, the
// port's idempotent writes where OpenFGA refuses a duplicate write and a missing delete, a model the
// server rejects, preshared-key authentication, a server that caches check answers, and a server
// stopped while tuple changes wait in the outbox. The port has no contextual tuples: a check is a
// tuple key and nothing else.

const ULID = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/

interface Ids {
  storeId: string
  modelId: string
}

/** The ids of a new store holding the service's model, as `authz init` makes them. */
async function storeOn(server: OpenFgaServer): Promise<Ids> {
  return initializeOpenFga(server.url, server.apiToken, await loadModel())
}

const ports: AuthorizationPort[] = []
afterAll(async () => {
  await Promise.all(ports.map((port) => port.close()))
})

/** A port on the server's store (`apiToken` null: none sent). */
function portOn(
  server: OpenFgaServer,
  ids: Ids,
  apiToken: string | null = server.apiToken ?? null,
): OpenFgaAuthorization {
  const port = new OpenFgaAuthorization({ apiUrl: server.url, apiToken: apiToken ?? undefined, ...ids })
  ports.push(port)
  return port
}

/** The configuration of an app on the server's store (`apiToken` null: none sent). */
function openFgaConfig(server: OpenFgaServer, ids: Ids, apiToken: string | null = server.apiToken ?? null) {
  return {
    ...ACCOUNT_TEST_CONFIG,
    'platform.authz.openfga.api-url': server.url,
    'platform.authz.openfga.store-id': ids.storeId,
    'platform.authz.openfga.model-id': ids.modelId,
    ...(apiToken === null ? {} : { 'platform.authz.openfga.api-token': apiToken }),
  }
}

interface ModelShape {
  schema_version: string
  type_definitions: { type: string; relations?: Record<string, unknown> }[]
}

/** A model's schema version, types and the names of their relations. */
const shapeOf = (model: ModelShape) => ({
  schemaVersion: model.schema_version,
  types: Object.fromEntries(
    model.type_definitions.map((t) => [t.type, Object.keys(t.relations ?? {}).sort()]),
  ),
})

const memberOf = (userId: string, organizationId: string): TupleKey => ({
  user: `user:${userId}`,
  relation: 'member',
  object: `organization:${organizationId}`,
})

const ownedBy = (organizationId: string, purchaseRequestId: string): TupleKey => ({
  user: `organization:${organizationId}`,
  relation: 'owner_organization',
  object: `purchase_request:${purchaseRequestId}`,
})

const createRequest = (t: TestApp, session: Parameters<typeof asUser>[1], title: string) =>
  asUser(t.app, session, { method: 'POST', url: '/api/purchase-requests', payload: { title } })

const readRequest = (t: TestApp, session: Parameters<typeof asUser>[1], id: string) =>
  asUser(t.app, session, { method: 'GET', url: `/api/purchase-requests/${id}` })

describe.runIf(openFgaAvailable)('OpenFGA, the real server', () => {
  let server: OpenFgaServer
  beforeAll(async () => {
    server = await startOpenFga()
  })
  afterAll(() => server?.stop())

  describe('npm run cli -- authz init', () => {
    it('creates a store named platform-core, writes the model of fga-model.fga and prints both ids', async () => {
      const env = {
        PLATFORM_AUTH_JWT_SECRET: testSecret(),
        PLATFORM_AUTHZ_OPENFGA_API_URL: server.url,
        LOG_LEVEL: 'warn',
      }
      const result = await runNode('src/cli.ts', ['authz', 'init'], env).done
      expect(result.stderr).toBe('')
      expect(result.code).toBe(0)
      const printed = JSON.parse(result.stdout) as Ids
      expect(printed).toEqual({ storeId: expect.stringMatching(ULID), modelId: expect.stringMatching(ULID) })

      const store = await fetch(`${server.url}/stores/${printed.storeId}`).then((res) => res.json())
      expect(store).toMatchObject({ id: printed.storeId, name: STORE_NAME })
      const written = (await fetch(
        `${server.url}/stores/${printed.storeId}/authorization-models/${printed.modelId}`,
      ).then((res) => res.json())) as { authorization_model: ModelShape & { id: string } }
      expect(written.authorization_model.id).toBe(printed.modelId)
      expect(shapeOf(written.authorization_model)).toEqual(shapeOf(await loadModel()))

      // The model's rules hold there: a member of the owning organization may view, not edit.
      const port = portOn(server, printed)
      await port.ready()
      const [userId, organizationId, requestId] = [randomUUID(), randomUUID(), randomUUID()]
      await port.write([memberOf(userId, organizationId), ownedBy(organizationId, requestId)], [])
      const asked = { user: `user:${userId}`, object: `purchase_request:${requestId}` }
      expect(await port.check({ ...asked, relation: 'can_view' })).toBe(true)
      expect(await port.check({ ...asked, relation: 'can_edit' })).toBe(false)
    })

    it('fails with the reason the server gives when it rejects the model, naming the store it created', async () => {
      const model = parseModel(
        'model\n  schema 1.1\ntype user\ntype document\n  relations\n    define viewer: [user] or editor\n',
      )
      const config = testConfig({ 'platform.authz.openfga.api-url': server.url })
      const error = await authzInit(config, model).then(
        () => undefined,
        (failure: unknown) => failure,
      )
      expect(error).toBeInstanceOf(AppError)
      expect(error).toMatchObject({ code: 'BAD_REQUEST' })
      const { message } = error as AppError
      expect(message).toMatch(/^OpenFGA rejected the model write \(store [0-9A-Z]{26} was created\): /)
      expect(message).toContain('document#editor')
    })
  })

  describe('tuple writes', () => {
    it('writes a tuple that exists and deletes one that does not without error, where OpenFGA itself refuses both', async () => {
      const ids = await storeOn(server)
      const [a, b, missing] = [randomUUID(), randomUUID(), randomUUID()].map((id) =>
        memberOf(id, 'acme'),
      ) as [TupleKey, TupleKey, TupleKey]

      // Asked plainly, OpenFGA answers both with an error of its own.
      const agents = createOpenFgaAgents()
      try {
        const raw = createOpenFgaClient({ apiUrl: server.url, ...ids }, agents)
        await raw.write({ writes: [a] })
        const refused = { statusCode: 400, apiErrorCode: 'write_failed_due_to_invalid_input' }
        await expect(raw.write({ writes: [a] })).rejects.toMatchObject(refused)
        await expect(raw.write({ deletes: [missing] })).rejects.toMatchObject(refused)
      } finally {
        agents.http.destroy()
        agents.https.destroy()
      }

      const port = portOn(server, ids)
      await port.write([a], [])
      await port.write([a, b], [missing])
      expect(await port.check(a)).toBe(true)
      expect(await port.check(b)).toBe(true)
      expect(await port.check(missing)).toBe(false)
      await port.write([], [b])
      await port.write([], [b])
      expect(await port.check(b)).toBe(false)
    })

    it('delivers repeated and redundant changes from the outbox in order, setting none aside', async () => {
      const ids = await storeOn(server)
      const t = await createTestAppForTest({ config: openFgaConfig(server, ids) })
      const [kept, removed] = [memberOf(randomUUID(), 'acme'), memberOf(randomUUID(), 'acme')]
      const change = (operation: 'write' | 'delete', tuple: TupleKey) => ({
        operation,
        subject: tuple.user,
        relation: tuple.relation,
        object: tuple.object,
      })
      for (const queued of [
        change('write', kept),
        change('write', kept),
        change('delete', removed),
        change('write', removed),
        change('delete', removed),
        change('delete', removed),
        change('delete', kept),
        change('write', kept),
      ]) {
        await queueTupleChanges(t.app, [queued])
      }

      expect(await t.app.authz.outbox.runOnce()).toBe(8)
      expect(await t.app.authz.outbox.pending()).toBe(0)
      const setAside = await t.app.db
        .selectFrom('authz_outbox')
        .select('id')
        .where('failed_at', 'is not', null)
        .execute()
      expect(setAside).toEqual([])
      expect(await t.app.authz.port.check(kept)).toBe(true)
      expect(await t.app.authz.port.check(removed)).toBe(false)
    })
  })
})

describe.runIf(openFgaAvailable)('OpenFGA requiring a preshared key', () => {
  const key = randomBytes(24).toString('base64url')
  let server: OpenFgaServer
  beforeAll(async () => {
    server = await startOpenFga({ presharedKey: key })
  })
  afterAll(() => server?.stop())

  it('is provisioned by authz init and serves the app with platform.authz.openfga.api-token set to the key', async () => {
    const env = {
      PLATFORM_AUTH_JWT_SECRET: testSecret(),
      PLATFORM_AUTHZ_OPENFGA_API_URL: server.url,
      LOG_LEVEL: 'warn',
    }
    const refused = await runNode('src/cli.ts', ['authz', 'init'], env).done
    expect(refused.code).toBe(1)
    expect(JSON.parse(refused.stderr.trim())).toEqual({
      code: 'SERVICE_UNAVAILABLE',
      message:
        'OpenFGA store creation failed: HTTP 401 (missing bearer token): not authenticated, check platform.authz.openfga.api-token',
    })
    const result = await runNode('src/cli.ts', ['authz', 'init'], {
      ...env,
      PLATFORM_AUTHZ_OPENFGA_API_TOKEN: key,
    }).done
    expect(result.code).toBe(0)
    const ids = JSON.parse(result.stdout) as Ids

    const t = await createTestAppForTest({ config: openFgaConfig(server, ids, key) })
    const ready = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expect(ready.json()).toMatchObject({ status: 'UP', checks: { authorization: 'UP' } })
    const { user, session } = await newActor(t.app)
    const allowed = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/authz/check',
      payload: { relation: 'member', objectType: 'organization', objectId: user.organizationId },
    })
    expect(allowed.json()).toEqual({ allowed: true })
  })

  it.each([
    ['a wrong key', 'not-the-key', 'unauthenticated'],
    ['no key', null, 'missing bearer token'],
  ])(
    'with %s, reports unauthenticated: readiness fails and nothing is allowed',
    async (_case, token, reason) => {
      const ids = await storeOn(server)
      const port = portOn(server, ids, token)
      const tuple = memberOf(randomUUID(), randomUUID())
      const unauthenticated = `HTTP 401 (${reason}): not authenticated, check platform.authz.openfga.api-token`
      for (const attempt of [() => port.check(tuple), () => port.write([tuple], []), () => port.ready()]) {
        const error = await attempt().then(
          () => undefined,
          (failure: unknown) => failure,
        )
        expect(error).toBeInstanceOf(AuthorizationUnavailableError)
        expect((error as Error).message).toContain(unauthenticated)
      }

      // The service on it: a member whose tuple is at the server (written with the key) gets no allow.
      const t = await createTestAppForTest({ config: openFgaConfig(server, ids, token) })
      const user = await newUser(t.app)
      await portOn(server, ids).write([memberOf(user.id, user.organizationId)], [])
      const ready = await t.app.inject({ method: 'GET', url: '/health/ready' })
      expectProblem(ready, 503, 'SERVICE_UNAVAILABLE')
      expect(ready.json().checks).toMatchObject({ authorization: 'DOWN' })
      const check = await asUser(t.app, await signIn(t.app, user), {
        method: 'POST',
        url: '/api/authz/check',
        payload: { relation: 'member', objectType: 'organization', objectId: user.organizationId },
      })
      expectProblem(check, 503, 'SERVICE_UNAVAILABLE')
      expect(check.json()).not.toHaveProperty('allowed')
      expect(t.logs.text()).toContain(unauthenticated)
      // The role change stays queued: it is delivered once the key is right.
      expect(await t.app.authz.outbox.pending()).toBe(1)
    },
  )
})

/** A port whose writes wait while held, and which runs `afterNextCheck` before its next answer is used. */
class HeldWritesPort extends SwitchablePort {
  #gate: PromiseWithResolvers<void> | null = null
  afterNextCheck: (() => Promise<void>) | null = null

  hold(): void {
    this.#gate = Promise.withResolvers<void>()
  }

  open(): void {
    this.#gate?.resolve()
    this.#gate = null
  }

  override async write(writes: TupleKey[], deletes: TupleKey[]): Promise<void> {
    await this.#gate?.promise
    return super.write(writes, deletes)
  }

  override async check(request: CheckRequest): Promise<boolean> {
    const answer = await super.check(request)
    const after = this.afterNextCheck
    this.afterNextCheck = null
    await after?.()
    return answer
  }
}

describe.runIf(openFgaAvailable)('OpenFGA caching check answers', () => {
  let server: OpenFgaServer
  beforeAll(async () => {
    server = await startOpenFga({
      flags: [
        '--check-query-cache-enabled',
        '--check-query-cache-ttl=5m',
        '--check-iterator-cache-enabled',
        '--check-iterator-cache-ttl=5m',
      ],
    })
  })
  afterAll(() => server?.stop())

  it('answers a fresh check from the tuples as they are, where a plain one may answer from its cache', async () => {
    const port = portOn(server, await storeOn(server))
    const tuple = memberOf(randomUUID(), randomUUID())
    expect(await port.check(tuple)).toBe(false)
    await port.write([tuple], [])
    expect(await port.check({ ...tuple, fresh: true })).toBe(true)
  })

  it('lets a creator read at once what they created, though the first answer was a cached no', async () => {
    const ids = await storeOn(server)
    const port = new HeldWritesPort(portOn(server, ids))
    const t = await createTestAppForTest({
      config: openFgaConfig(server, ids),
      deps: { authorization: port },
    })
    const { session } = await newActor(t.app)
    port.hold()
    const created = await createRequest(t, session, 'Monitors')
    expect(created.statusCode).toBe(201)
    // The read is asked before the ownership tuple reaches the server: the server says no, and
    // keeps that answer. Only then does the queued change go through.
    port.afterNextCheck = async () => {
      port.open()
      await t.app.authz.outbox.runOnce()
    }
    const read = await readRequest(t, session, created.json().id)
    expect(read.statusCode, read.body).toBe(200)
    expect(port.afterNextCheck).toBeNull()
  })
})

describe.runIf(openFgaAvailable)('OpenFGA stopped while changes wait in the outbox', () => {
  const adminUrl = process.env.TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
  const datastoreName = `openfga_test_${randomBytes(6).toString('hex')}`
  const datastore = { postgres: databaseUrl(adminUrl, datastoreName) }
  let server: OpenFgaServer | undefined
  beforeAll(async () => {
    await adminQuery(adminUrl, `create database ${datastoreName}`)
    server = await startOpenFga({ datastore })
  })
  afterAll(async () => {
    await server?.stop()
    await adminQuery(adminUrl, `drop database if exists ${datastoreName} with (force)`)
  })

  it('answers 503 while it is down, keeps the changes, and delivers them in order once it is back', async () => {
    const first = server as OpenFgaServer
    const ids = await storeOn(first)
    const t = await createTestAppForTest({ config: openFgaConfig(first, ids) })
    const { user, session } = await newActor(t.app)
    const created = await createRequest(t, session, 'Desks')
    expect(created.statusCode).toBe(201)
    const id: string = created.json().id
    expect((await readRequest(t, session, id)).statusCode).toBe(200)
    expect(await t.app.authz.outbox.pending()).toBe(0)

    await first.stop()
    expectProblem(await readRequest(t, session, id), 503, 'SERVICE_UNAVAILABLE')
    expectProblem(await createRequest(t, session, 'Chairs'), 503, 'SERVICE_UNAVAILABLE')
    const ready = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expectProblem(ready, 503, 'SERVICE_UNAVAILABLE')
    expect(ready.json().checks).toMatchObject({ authorization: 'DOWN' })

    // Changes made meanwhile: a new colleague, and a request owned, disowned and owned again.
    const colleague = await newUser(t.app, { organizationId: user.organizationId })
    const [disowned, owned] = [randomUUID(), randomUUID()]
    const org = `organization:${user.organizationId}`
    const change = (operation: 'write' | 'delete', object: string) => ({
      operation,
      subject: org,
      relation: 'owner_organization',
      object: `purchase_request:${object}`,
    })
    for (const queued of [
      change('write', disowned),
      change('write', owned),
      change('delete', owned),
      change('delete', disowned),
      change('write', owned),
    ]) {
      await queueTupleChanges(t.app, [queued])
    }
    await t.app.authz.outbox.runOnce()
    const queued = await t.app.db
      .selectFrom('authz_outbox')
      .select(['processed_at', 'failed_at', 'last_error'])
      .where('processed_at', 'is', null)
      .orderBy('id')
      .execute()
    expect(queued).toHaveLength(6)
    expect(queued.every((row) => row.failed_at === null)).toBe(true)
    expect(queued[0]?.last_error).toMatch(/^OpenFGA write failed/)

    // The same server again, on its datastore and address.
    server = await startOpenFga({ datastore, httpPort: Number(new URL(first.url).port) })
    t.clock.advance(10 * 60_000)
    expect(await t.app.authz.outbox.runOnce()).toBe(6)
    expect(await t.app.authz.outbox.pending()).toBe(0)
    const readyAgain = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expect(readyAgain.json()).toMatchObject({ status: 'UP', checks: { authorization: 'UP' } })

    // What was delivered before the stop survived it; what was queued meanwhile arrived in order.
    expect((await readRequest(t, session, id)).statusCode).toBe(200)
    expect((await readRequest(t, await signIn(t.app, colleague), id)).statusCode).toBe(200)
    const port = portOn(server, ids)
    expect(await port.check(memberOf(colleague.id, user.organizationId))).toBe(true)
    expect(
      await port.check({ user: org, relation: 'owner_organization', object: `purchase_request:${owned}` }),
    ).toBe(true)
    expect(
      await port.check({ user: org, relation: 'owner_organization', object: `purchase_request:${disowned}` }),
    ).toBe(false)
  })
})
