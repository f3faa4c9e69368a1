import { randomBytes } from 'node:crypto'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { authzInit, initializeOpenFga } from '../src/authz/init.ts'
import { type AuthorizationModel, loadModel } from '../src/authz/model.ts'
import { OpenFgaAuthorization, type OpenFgaOptions } from '../src/authz/openfga.ts'
import { AuthorizationRequestError, AuthorizationUnavailableError, type TupleKey } from '../src/authz/port.ts'
import { type ConfigSource, loadConfig } from '../src/config.ts'
import { AppError } from '../src/errors.ts'
import { FakeOpenFga, ulid } from './helpers/fake-openfga.ts'
import { realOpenFgaPorts } from './helpers/openfga.ts'
import { closedPort } from './helpers/smtp.ts'

// The OpenFGA adapter against a recording fake of OpenFGA's HTTP API (test/helpers/fake-openfga.ts
// cites the documents it follows): what goes on the wire, how answers and failures are mapped, and
// that a check never allows when OpenFGA cannot answer. The same adapter runs the shared contract
// suite against a real OpenFGA in authz.openfga.test.ts when TEST_OPENFGA_API_URL is set.

let fake: FakeOpenFga
let model: AuthorizationModel
let storeId: string
let modelId: string
const opened: OpenFgaAuthorization[] = []

beforeAll(async () => {
  fake = await FakeOpenFga.start()
  model = await loadModel()
  ;({ storeId, modelId } = await initializeOpenFga(fake.url, undefined, model))
})

afterAll(async () => {
  await fake.close()
})

beforeEach(() => {
  fake.reset()
})

afterEach(async () => {
  await Promise.all(opened.splice(0).map((port) => port.close()))
})

// Only the configuration: the CLI command needs no more of the app.
const testConfig = (source: ConfigSource = {}) =>
  loadConfig({ 'platform.auth.jwt.secret': randomBytes(32).toString('base64'), ...source })

/** An adapter on the fake's store, with quick retries so failure tests stay fast. */
function adapter(overrides: Partial<OpenFgaOptions> = {}): OpenFgaAuthorization {
  const port = new OpenFgaAuthorization({
    apiUrl: fake.url,
    storeId,
    modelId,
    timeoutMs: 1_000,
    minRetryWaitMs: 5,
    ...overrides,
  })
  opened.push(port)
  return port
}

const member = (user: string, org: string): TupleKey => ({
  user: `user:${user}`,
  relation: 'member',
  object: `organization:${org}`,
})

/** What a call settled to, so a test can assert it never was `true`. */
async function outcome<T>(promise: Promise<T>): Promise<T | Error> {
  try {
    return await promise
  } catch (error) {
    return error as Error
  }
}

describe('OpenFGA store and model initialization', () => {
  it('creates a store named platform-core and writes the model of fga-model.fga into it', async () => {
    const ids = await initializeOpenFga(fake.url, 'init-token', model)
    expect(fake.requests.map((r) => [r.method, r.path])).toEqual([
      ['POST', '/stores'],
      ['POST', `/stores/${ids.storeId}/authorization-models`],
    ])
    expect(fake.requests[0]?.body).toEqual({ name: 'platform-core' })
    expect(fake.requests[1]?.body).toEqual(model)
    expect(fake.requests.every((r) => r.headers.authorization === 'Bearer init-token')).toBe(true)
    expect(fake.stores.get(ids.storeId)?.models.has(ids.modelId)).toBe(true)
  })

  it('authz init refuses to run without an api-url and names the property', async () => {
    const error = await outcome(authzInit(testConfig()))
    expect(error).toMatchObject({ name: 'ConfigError' })
    expect((error as Error).message).toContain('platform.authz.openfga.api-url')
  })

  it('authz init prints the ids of the store and model it created', async () => {
    const ids = await authzInit(testConfig({ 'platform.authz.openfga.api-url': fake.url }), model)
    expect(Object.keys(ids).sort()).toEqual(['modelId', 'storeId'])
    expect(fake.stores.get(ids.storeId)?.models.has(ids.modelId)).toBe(true)
  })

  it('authz init answers SERVICE_UNAVAILABLE when the server refuses the connection', async () => {
    const url = `http://127.0.0.1:${await closedPort()}`
    const error = await outcome(authzInit(testConfig({ 'platform.authz.openfga.api-url': url }), model))
    expect(error).toBeInstanceOf(AppError)
    expect(error).toMatchObject({ code: 'SERVICE_UNAVAILABLE' })
  })

  it('reports a model OpenFGA rejects as a request error, not an outage', async () => {
    const invalidModel = { schema_version: '1.0', type_definitions: [] } as AuthorizationModel
    await expect(initializeOpenFga(fake.url, undefined, invalidModel)).rejects.toBeInstanceOf(
      AuthorizationRequestError,
    )
  })
})

describe('OpenFGA requests on the wire', () => {
  it('check posts the tuple key with the pinned model id and maps {allowed}', async () => {
    const port = adapter()
    await port.write([member('ann', 'acme')], [])
    fake.reset()
    expect(await port.check(member('ann', 'acme'))).toBe(true)
    expect(await port.check(member('bob', 'acme'))).toBe(false)
    const [first] = fake.requests
    expect(first?.method).toBe('POST')
    expect(first?.path).toBe(`/stores/${storeId}/check`)
    expect(first?.headers['content-type']).toBe('application/json')
    expect(first?.body).toMatchObject({
      tuple_key: { user: 'user:ann', relation: 'member', object: 'organization:acme' },
      authorization_model_id: modelId,
    })
    expect(fake.requests).toHaveLength(2)
  })

  it('write sends writes and deletes in one request, ignoring duplicates and missing tuples', async () => {
    const port = adapter()
    await port.write([member('carl', 'acme')], [])
    fake.reset()
    await port.write([member('carl', 'acme'), member('dora', 'acme')], [member('nobody', 'acme')])
    expect(fake.requests).toHaveLength(1)
    expect(fake.requests[0]?.method).toBe('POST')
    expect(fake.requests[0]?.path).toBe(`/stores/${storeId}/write`)
    expect(fake.requests[0]?.body).toEqual({
      authorization_model_id: modelId,
      writes: { tuple_keys: [member('carl', 'acme'), member('dora', 'acme')], on_duplicate: 'ignore' },
      deletes: { tuple_keys: [member('nobody', 'acme')], on_missing: 'ignore' },
    })
    await port.write([], [member('carl', 'acme'), member('carl', 'acme')])
    expect(fake.requests[1]?.body).toEqual({
      authorization_model_id: modelId,
      deletes: { tuple_keys: [member('carl', 'acme')], on_missing: 'ignore' },
    })
    expect(fake.tuples(storeId)).toContainEqual(member('dora', 'acme'))
    expect(fake.tuples(storeId)).not.toContainEqual(member('carl', 'acme'))
  })

  it('write splits a change of more than 100 tuples into requests of at most 100, deletes first', async () => {
    const port = adapter()
    const writes = Array.from({ length: 150 }, (_, i) => member(`w${i}`, 'bulk'))
    const deletes = Array.from({ length: 30 }, (_, i) => member(`d${i}`, 'bulk'))
    await port.write(writes, deletes)
    const bodies = fake.requests.map(
      (r) => r.body as { writes?: { tuple_keys: TupleKey[] }; deletes?: { tuple_keys: TupleKey[] } },
    )
    expect(bodies.map((b) => [b.deletes?.tuple_keys.length ?? 0, b.writes?.tuple_keys.length ?? 0])).toEqual([
      [30, 70],
      [0, 80],
    ])
    expect(bodies.flatMap((b) => b.writes?.tuple_keys ?? [])).toEqual(writes)
    expect(fake.tuples(storeId).filter((t) => t.object === 'organization:bulk')).toHaveLength(150)
  })

  it('write with nothing to change sends nothing, and refuses a tuple both written and deleted', async () => {
    const port = adapter()
    await port.write([], [])
    await expect(port.write([member('eve', 'acme')], [member('eve', 'acme')])).rejects.toBeInstanceOf(
      AuthorizationRequestError,
    )
    expect(fake.requests).toHaveLength(0)
  })

  it('ready reads the pinned authorization model', async () => {
    await adapter().ready()
    expect(fake.requests.map((r) => [r.method, r.path])).toEqual([
      ['GET', `/stores/${storeId}/authorization-models/${modelId}`],
    ])
  })

  it('sends Authorization: Bearer with an api token, and no Authorization header without one', async () => {
    await adapter({ apiToken: 'fga-secret-token' }).check(member('ann', 'acme'))
    await adapter().check(member('ann', 'acme'))
    expect(fake.requests[0]?.headers.authorization).toBe('Bearer fga-secret-token')
    expect(fake.requests[1]?.headers.authorization).toBeUndefined()
  })
})

describe('OpenFGA failures', () => {
  it('maps an unknown type or relation (400) to a request error, without retrying', async () => {
    const port = adapter()
    const unknownType = await outcome(
      port.check({ user: 'user:a', relation: 'viewer', object: 'document:1' }),
    )
    expect(unknownType).toBeInstanceOf(AuthorizationRequestError)
    expect((unknownType as Error).message).toContain("type 'document' not found")
    await expect(
      port.check({ user: 'user:a', relation: 'owner', object: 'organization:1' }),
    ).rejects.toBeInstanceOf(AuthorizationRequestError)
    await expect(
      port.write([{ user: 'user:a', relation: 'owner', object: 'organization:1' }], []),
    ).rejects.toBeInstanceOf(AuthorizationRequestError)
    expect(fake.requests).toHaveLength(3)
  })

  it('retries a 500 and answers when the server recovers', async () => {
    const port = adapter()
    await port.write([member('jo', 'acme')], [])
    fake.reset()
    fake.scripted.push({ status: 500 })
    expect(await port.check(member('jo', 'acme'))).toBe(true)
    expect(fake.requestsTo('/check')).toHaveLength(2)
  })

  it.each([500, 503])(
    'gives up after the retries on %i and reports the server unavailable',
    async (status) => {
      const port = adapter({ maxRetries: 2 })
      for (let i = 0; i < 3; i++)
        fake.scripted.push({ status, body: { code: 'internal_error', message: 'boom' } })
      const result = await outcome(port.check(member('ann', 'acme')))
      expect(result).toBeInstanceOf(AuthorizationUnavailableError)
      expect(fake.requestsTo('/check')).toHaveLength(3)
    },
  )

  it('does not wait out a Retry-After longer than its deadline: 429 fails at once', async () => {
    const port = adapter({ deadlineMs: 3_000 })
    fake.scripted.push({
      status: 429,
      body: { code: 'rate_limit_exceeded', message: 'slow down' },
      headers: { 'retry-after': '60' },
    })
    const started = performance.now()
    expect(await outcome(port.check(member('ann', 'acme')))).toBeInstanceOf(AuthorizationUnavailableError)
    expect(performance.now() - started).toBeLessThan(1_000)
    expect(fake.requests).toHaveLength(1)
  })

  it('reports a server that accepts the connection but never answers as unavailable, within its deadline', async () => {
    fake.hang = true
    const port = adapter({ timeoutMs: 200, maxRetries: 2, deadlineMs: 1_000 })
    const started = performance.now()
    const result = await outcome(port.check(member('ann', 'acme')))
    const elapsed = performance.now() - started
    expect(result).toBeInstanceOf(AuthorizationUnavailableError)
    expect(elapsed).toBeGreaterThanOrEqual(190)
    expect(elapsed).toBeLessThan(1_500)
    expect(fake.requests.length).toBeGreaterThanOrEqual(1)
  })

  it('reports a refused connection as unavailable', async () => {
    const port = new OpenFgaAuthorization({
      apiUrl: `http://127.0.0.1:${await closedPort()}`,
      storeId,
      modelId,
      minRetryWaitMs: 5,
    })
    opened.push(port)
    expect(await outcome(port.check(member('ann', 'acme')))).toBeInstanceOf(AuthorizationUnavailableError)
    await expect(port.write([member('ann', 'acme')], [])).rejects.toBeInstanceOf(
      AuthorizationUnavailableError,
    )
    await expect(port.ready()).rejects.toBeInstanceOf(AuthorizationUnavailableError)
  })

  it('reports an unknown store or model as unavailable (misconfiguration), not as a bad request', async () => {
    const unknownStore = adapter({ storeId: ulid() })
    expect(await outcome(unknownStore.check(member('ann', 'acme')))).toBeInstanceOf(
      AuthorizationUnavailableError,
    )
    await expect(unknownStore.ready()).rejects.toBeInstanceOf(AuthorizationUnavailableError)
    const unknownModel = adapter({ modelId: ulid() })
    expect(await outcome(unknownModel.check(member('ann', 'acme')))).toBeInstanceOf(
      AuthorizationUnavailableError,
    )
    await expect(unknownModel.ready()).rejects.toBeInstanceOf(AuthorizationUnavailableError)
  })

  it('never lets a check resolve to true when OpenFGA fails or answers nonsense', async () => {
    const port = adapter({ maxRetries: 0 })
    await port.write([member('ann', 'acme')], [])
    const answers = [
      { status: 400, body: { code: 'validation_error', message: 'bad' } },
      { status: 401, body: { code: 'unauthenticated', message: 'unauthenticated' } },
      { status: 403, body: { code: 'forbidden', message: 'forbidden' } },
      { status: 404, body: { code: 'store_id_not_found', message: 'Store ID not found' } },
      { status: 409, body: { code: '10', message: 'transaction conflict' } },
      { status: 422, body: { code: 'throttled_timeout_error', message: 'throttled' } },
      { status: 429, body: { code: 'rate_limit_exceeded', message: 'slow down' } },
      { status: 500, body: { code: 'internal_error', message: 'Internal Server Error' } },
      { status: 501, body: { code: 'unimplemented', message: 'unimplemented' } },
      { status: 503, body: { code: 'unavailable', message: 'unavailable' } },
      { status: 200, body: { allowed: 'true' } },
      { status: 200, body: {} },
    ]
    for (const answer of answers) {
      fake.scripted.push(answer)
      const result = await outcome(port.check(member('ann', 'acme')))
      expect(result, `answer ${JSON.stringify(answer)}`).not.toBe(true)
      if (answer.status >= 500 || answer.status === 429 || answer.status === 409 || answer.status === 422) {
        expect(result).toBeInstanceOf(AuthorizationUnavailableError)
      }
    }
    // And the tuple was there all along: a healthy answer is still true.
    expect(await port.check(member('ann', 'acme'))).toBe(true)
  })

  it('does not put the api token in the errors it reports', async () => {
    const port = adapter({ apiToken: 'fga-secret-token', maxRetries: 0 })
    fake.scripted.push({ status: 401, body: { code: 'unauthenticated', message: 'unauthenticated' } })
    const error = await outcome(port.check(member('ann', 'acme')))
    expect(error).toBeInstanceOf(AuthorizationUnavailableError)
    expect(
      JSON.stringify({ message: (error as Error).message, cause: String((error as Error).cause) }),
    ).not.toContain('fga-secret-token')
  })
})

describe('the real-server contract harness (test/helpers/openfga.ts)', () => {
  it('gives each model a store of its own, empties it on reset and deletes it on close', async () => {
    const dsl = 'model\n  schema 1.1\n\ntype user\n\ntype team\n  relations\n    define member: [user]\n'
    const harness = await realOpenFgaPorts(fake.url)(dsl)
    // POST /stores, then POST /stores/{id}/authorization-models.
    const ownStore = fake.requests[1]?.path.split('/')[2] ?? ''
    expect(ownStore).not.toBe(storeId)
    const tuples = Array.from({ length: 120 }, (_, i) => ({
      user: `user:${i}`,
      relation: 'member',
      object: 'team:t',
    }))
    await harness.port.write(tuples, [])
    expect(await harness.port.check({ user: 'user:3', relation: 'member', object: 'team:t' })).toBe(true)
    await harness.reset()
    expect(fake.tuples(ownStore)).toEqual([])
    expect(await harness.port.check({ user: 'user:3', relation: 'member', object: 'team:t' })).toBe(false)
    await harness.close()
    expect(fake.stores.has(ownStore)).toBe(false)
  })
})
