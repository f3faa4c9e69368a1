import { randomBytes } from 'node:crypto'
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

// A small stand-in for OpenFGA's HTTP API, for tests that cannot run the real server. It records
// every request and answers the endpoints the adapter calls with the status codes and bodies that
// OpenFGA documents: openfga/api docs/openapiv2/apidocs.swagger.json (CreateStoreResponse 201,
// DeleteStore 204, WriteAuthorizationModelResponse 201, ReadAuthorizationModelResponse,
// CheckResponse, ReadResponse, WriteResponse `{}`;
// ValidationErrorMessageResponse 400 / PathUnknownErrorMessageResponse 404 /
// InternalErrorMessageResponse 500 as `{code, message}`), the error codes and messages of
// openfga/openfga pkg/server/errors/errors.go, and the Write API page
// (https://openfga.dev/docs/api/service/relationship-tuples/add-or-delete-tuples: on_duplicate /
// on_missing, 100 tuples per write). It evaluates direct tuples only: no rewrites, no usersets.

export interface RecordedRequest {
  method: string
  path: string
  headers: IncomingHttpHeaders
  body: unknown
}

/** An answer the fake gives instead of its own (errors, malformed or reordered bodies). */
export interface ScriptedAnswer {
  status: number
  body?: unknown
  headers?: Record<string, string>
}

interface Tuple {
  user: string
  relation: string
  object: string
}

interface TypeDefinition {
  type: string
  relations?: Record<string, unknown>
}

interface Model {
  id: string
  schema_version: string
  type_definitions: TypeDefinition[]
}

interface Store {
  id: string
  name: string
  models: Map<string, Model>
  tuples: Map<string, Tuple>
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'

/** A ULID (OpenFGA's id format; the SDK refuses other store and model ids). */
export function ulid(): string {
  let time = Date.now()
  let head = ''
  for (let i = 0; i < 10; i++) {
    head = CROCKFORD.charAt(time % 32) + head
    time = Math.floor(time / 32)
  }
  const tail = [...randomBytes(16)].map((b) => CROCKFORD.charAt(b % 32)).join('')
  return head + tail
}

const MAX_TUPLES_PER_WRITE = 100

class OpenFgaError extends Error {
  readonly status: number
  readonly code: string
  constructor(status: number, code: string, message: string) {
    super(message)
    this.status = status
    this.code = code
  }
}

const invalid = (code: string, message: string) => new OpenFgaError(400, code, message)
const keyOf = (t: Tuple) => `${t.user}|${t.relation}|${t.object}`

export class FakeOpenFga {
  readonly requests: RecordedRequest[] = []
  readonly stores = new Map<string, Store>()
  /** Answers the next requests with these, one each, before answering normally again. */
  readonly scripted: ScriptedAnswer[] = []
  /** Accept requests and never answer them. */
  hang = false
  readonly #server: Server

  private constructor(server: Server) {
    this.#server = server
  }

  static async start(): Promise<FakeOpenFga> {
    let self: FakeOpenFga | undefined
    const server = createServer((request, response) => {
      const chunks: Buffer[] = []
      request.on('data', (chunk: Buffer) => chunks.push(chunk))
      request.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        self?.handle(request.method ?? 'GET', request.url ?? '/', request.headers, text, response)
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
    self = new FakeOpenFga(server)
    return self
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`
  }

  /** The requests to paths ending with `suffix` (e.g. `/check`). */
  requestsTo(suffix: string): RecordedRequest[] {
    return this.requests.filter((r) => r.path.endsWith(suffix))
  }

  reset(): void {
    this.requests.length = 0
    this.scripted.length = 0
    this.hang = false
  }

  /** Creates a store with a model, as `authz init` would, without recording requests. */
  seed(typeDefinitions: TypeDefinition[]): { storeId: string; modelId: string } {
    const store: Store = { id: ulid(), name: 'seeded', models: new Map(), tuples: new Map() }
    const model: Model = { id: ulid(), schema_version: '1.1', type_definitions: typeDefinitions }
    store.models.set(model.id, model)
    this.stores.set(store.id, store)
    return { storeId: store.id, modelId: model.id }
  }

  tuples(storeId: string): Tuple[] {
    return [...(this.stores.get(storeId)?.tuples.values() ?? [])]
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
  }

  handle(method: string, path: string, headers: IncomingHttpHeaders, text: string, response: ServerResponse) {
    let body: unknown
    try {
      body = text === '' ? undefined : JSON.parse(text)
    } catch {
      body = text
    }
    this.requests.push({ method, path, headers, body })
    if (this.hang) return
    const scripted = this.scripted.shift()
    if (scripted) {
      const body = scripted.body ?? { code: 'internal_error', message: 'Internal Server Error' }
      send(response, scripted.status, body, scripted.headers)
      return
    }
    try {
      const [status, answer] = this.route(method, path, (body ?? {}) as Record<string, unknown>)
      send(response, status, answer)
    } catch (error) {
      if (!(error instanceof OpenFgaError)) throw error
      send(response, error.status, { code: error.code, message: error.message })
    }
  }

  route(method: string, path: string, body: Record<string, unknown>): [number, unknown] {
    if (method === 'POST' && path === '/stores') return this.createStore(body)
    const whole = /^\/stores\/([^/]+)$/.exec(path)
    if (method === 'DELETE' && whole) {
      if (!this.stores.delete(decodeURIComponent(whole[1] ?? ''))) {
        throw new OpenFgaError(404, 'store_id_not_found', 'Store ID not found')
      }
      return [204, undefined]
    }
    const match = /^\/stores\/([^/]+)\/(.+)$/.exec(path)
    if (!match) throw new OpenFgaError(404, 'undefined_endpoint', 'Not Found')
    const store = this.stores.get(decodeURIComponent(match[1] ?? ''))
    if (!store) throw new OpenFgaError(404, 'store_id_not_found', 'Store ID not found')
    const rest = match[2] ?? ''
    if (method === 'POST' && rest === 'authorization-models') return this.writeModel(store, body)
    const read = /^authorization-models\/([^/]+)$/.exec(rest)
    if (method === 'GET' && read) {
      const model = store.models.get(decodeURIComponent(read[1] ?? ''))
      if (!model) throw invalid('authorization_model_not_found', `Authorization Model '${read[1]}' not found`)
      return [200, { authorization_model: model }]
    }
    if (method !== 'POST') throw new OpenFgaError(404, 'undefined_endpoint', 'Not Found')
    switch (rest) {
      case 'check':
        return this.check(store, body)
      case 'write':
        return this.write(store, body)
      case 'read':
        return this.read(store, body)
      default:
        throw new OpenFgaError(404, 'undefined_endpoint', 'Not Found')
    }
  }

  createStore(body: Record<string, unknown>): [number, unknown] {
    if (typeof body.name !== 'string' || body.name.length < 3) {
      throw invalid('validation_error', 'invalid CreateStoreRequest.Name: value does not match regex pattern')
    }
    const now = new Date().toISOString()
    const store: Store = { id: ulid(), name: body.name, models: new Map(), tuples: new Map() }
    this.stores.set(store.id, store)
    return [201, { id: store.id, name: store.name, created_at: now, updated_at: now }]
  }

  writeModel(store: Store, body: Record<string, unknown>): [number, unknown] {
    if (body.schema_version !== '1.1' || !Array.isArray(body.type_definitions)) {
      throw invalid('invalid_authorization_model', 'invalid schema version or type definitions')
    }
    const model: Model = {
      id: ulid(),
      schema_version: body.schema_version,
      type_definitions: body.type_definitions as TypeDefinition[],
    }
    store.models.set(model.id, model)
    return [201, { authorization_model_id: model.id }]
  }

  model(store: Store, body: Record<string, unknown>): Model {
    const id = body.authorization_model_id
    if (typeof id === 'string' && id !== '') {
      const model = store.models.get(id)
      if (!model) throw invalid('authorization_model_not_found', `Authorization Model '${id}' not found`)
      return model
    }
    const latest = [...store.models.values()].at(-1)
    if (!latest)
      throw invalid(
        'latest_authorization_model_not_found',
        `No authorization models found for store '${store.id}'`,
      )
    return latest
  }

  validate(model: Model, tuple: Tuple): void {
    const type = tuple.object.split(':')[0] ?? ''
    const definition = model.type_definitions.find((t) => t.type === type)
    if (!definition) throw invalid('type_not_found', `type '${type}' not found`)
    if (!definition.relations?.[tuple.relation]) {
      throw invalid('relation_not_found', `relation '${type}#${tuple.relation}' not found`)
    }
  }

  check(store: Store, body: Record<string, unknown>): [number, unknown] {
    const tuple = body.tuple_key as Tuple
    this.validate(this.model(store, body), tuple)
    return [200, { allowed: store.tuples.has(keyOf(tuple)), resolution: '' }]
  }

  write(store: Store, body: Record<string, unknown>): [number, unknown] {
    const model = this.model(store, body)
    const writes = body.writes as { tuple_keys: Tuple[]; on_duplicate?: string } | undefined
    const deletes = body.deletes as { tuple_keys: Tuple[]; on_missing?: string } | undefined
    const toWrite = writes?.tuple_keys ?? []
    const toDelete = deletes?.tuple_keys ?? []
    if (toWrite.length + toDelete.length === 0) {
      throw invalid(
        'invalid_write_input',
        'Invalid input. Make sure you provide at least one write, or at least one delete',
      )
    }
    if (toWrite.length + toDelete.length > MAX_TUPLES_PER_WRITE) {
      throw invalid(
        'exceeded_entity_limit',
        `The number of write operations exceeds the allowed limit of ${MAX_TUPLES_PER_WRITE}`,
      )
    }
    const seen = new Set<string>()
    for (const tuple of [...toWrite, ...toDelete]) {
      if (seen.has(keyOf(tuple))) {
        throw invalid(
          'cannot_allow_duplicate_tuples_in_one_request',
          `duplicate tuple in write: user: '${tuple.user}', relation: '${tuple.relation}', object: '${tuple.object}'`,
        )
      }
      seen.add(keyOf(tuple))
    }
    for (const tuple of toWrite) {
      this.validate(model, tuple)
      if (store.tuples.has(keyOf(tuple)) && writes?.on_duplicate !== 'ignore') {
        throw invalid(
          'write_failed_due_to_invalid_input',
          `cannot write a tuple which already exists: ${keyOf(tuple)}`,
        )
      }
    }
    for (const tuple of toDelete) {
      if (!store.tuples.has(keyOf(tuple)) && deletes?.on_missing !== 'ignore') {
        throw invalid(
          'write_failed_due_to_invalid_input',
          `cannot delete a tuple which does not exist: ${keyOf(tuple)}`,
        )
      }
    }
    // Atomic: nothing is applied unless every operation was valid.
    for (const tuple of toDelete) store.tuples.delete(keyOf(tuple))
    for (const tuple of toWrite) store.tuples.set(keyOf(tuple), { ...tuple })
    return [200, {}]
  }

  /** Reads every tuple (no tuple_key filter here), `page_size` at a time. */
  read(store: Store, body: Record<string, unknown>): [number, unknown] {
    const size = typeof body.page_size === 'number' ? body.page_size : 50
    const start =
      typeof body.continuation_token === 'string' && body.continuation_token
        ? Number(body.continuation_token)
        : 0
    const all = [...store.tuples.values()]
    const tuples = all.slice(start, start + size).map((key) => ({ key, timestamp: new Date().toISOString() }))
    const next = start + size < all.length ? String(start + size) : ''
    return [200, { tuples, continuation_token: next }]
  }
}

function send(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  if (body === undefined) {
    response.writeHead(status, headers)
    response.end()
    return
  }
  response.writeHead(status, { 'content-type': 'application/json', ...headers })
  response.end(JSON.stringify(body))
}
