import http from 'node:http'
import https from 'node:https'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  ClientWriteRequestOnDuplicateWrites,
  ClientWriteRequestOnMissingDeletes,
  ConsistencyPreference,
  CredentialsMethod,
  FgaApiError,
  FgaApiInternalError,
  FgaApiRateLimitExceededError,
  FgaApiValidationError,
  FgaError,
  FgaValidationError,
  OpenFgaClient,
} from '@openfga/sdk'
import { ConfigError } from '../config.ts'
import {
  type AuthorizationPort,
  AuthorizationRequestError,
  AuthorizationUnavailableError,
  type CheckRequest,
  type TupleKey,
} from './port.ts'

// The authorization port over OpenFGA's HTTP API, through @openfga/sdk's OpenFgaClient.
//
// Every query is pinned to the configured authorization model id. The adapter fails closed: an
// answer it cannot get (network error, timeout, 5xx, 429, a store or model that does not exist)
// is an AuthorizationUnavailableError, never an allow; only a request OpenFGA rejects as invalid
// (400: unknown type or relation, malformed tuple) is an AuthorizationRequestError.
//
// Retries are the adapter's, not the SDK's (whose retryParams are set to 0): the SDK retries
// timeouts too and honours a Retry-After of up to 30 minutes with a timer nothing can cancel
// (common.js, attemptHttpRequest), so its total time cannot be bounded. Here each operation has a
// deadline, and a retry is only started when a whole attempt still fits in it.

/** OpenFGA's default `maxTuplesPerWrite`: writes and deletes of one Write request together. */
export const OPENFGA_MAX_TUPLES_PER_WRITE = 100

const ULID = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/

export interface OpenFgaConnection {
  /** OpenFGA's HTTP address, e.g. `http://openfga:8080`. */
  apiUrl: string
  /** Sent as `Authorization: Bearer <token>` (OpenFGA's preshared-key authentication). */
  apiToken?: string | undefined
  /** Per HTTP request, connection included. */
  timeoutMs?: number | undefined
}

export interface OpenFgaOptions extends Omit<OpenFgaConnection, 'apiUrl'> {
  apiUrl: string | undefined
  storeId: string | undefined
  modelId: string | undefined
  /** Further attempts after a transient failure (network, timeout, 409, 422 throttling, 429, 5xx). */
  maxRetries?: number | undefined
  /** The first backoff; each retry doubles it, with jitter. */
  minRetryWaitMs?: number | undefined
  /** Upper bound of one operation, retries and backoff included. */
  deadlineMs?: number | undefined
}

const DEFAULTS = { timeoutMs: 2_000, maxRetries: 2, minRetryWaitMs: 100, deadlineMs: 5_000 }

/** The HTTP agents of one client, so that closing it closes its kept-alive connections. */
export interface OpenFgaAgents {
  http: http.Agent
  https: https.Agent
}

export function createOpenFgaAgents(): OpenFgaAgents {
  return { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) }
}

/** An OpenFgaClient with our timeout, agents and credentials, and without the SDK's own retries. */
export function createOpenFgaClient(
  connection: OpenFgaConnection & { storeId?: string; modelId?: string },
  agents: OpenFgaAgents,
): OpenFgaClient {
  const apiUrl = connection.apiUrl.replace(/\/+$/, '')
  try {
    return new OpenFgaClient({
      apiUrl,
      ...(connection.storeId === undefined ? {} : { storeId: connection.storeId }),
      ...(connection.modelId === undefined ? {} : { authorizationModelId: connection.modelId }),
      credentials: connection.apiToken
        ? { method: CredentialsMethod.ApiToken, config: { token: connection.apiToken } }
        : { method: CredentialsMethod.None },
      retryParams: { maxRetry: 0 },
      // Spread into every axios request by the SDK (api.js: `{ ...configuration.baseOptions, ...options }`).
      baseOptions: {
        timeout: connection.timeoutMs ?? DEFAULTS.timeoutMs,
        httpAgent: agents.http,
        httpsAgent: agents.https,
      },
    })
  } catch (error) {
    throw new ConfigError('platform.authz.openfga.api-url', `is not usable: ${(error as Error).message}`)
  }
}

// 400 codes (ErrorCode in openfga/api's openapi document) that say the store's configuration is
// wrong or the server gave up, not that the caller asked something the model cannot express.
const NOT_THE_CALLERS_FAULT = new Set([
  'authorization_model_not_found',
  'latest_authorization_model_not_found',
  'authorization_model_resolution_too_complex',
  'store_id_invalid_length',
  'authorization_model_id_too_long',
  'cancelled',
])

function describeFailure(error: unknown): string {
  if (error instanceof FgaApiError) {
    const code = (error as FgaApiError & { apiErrorCode?: string }).apiErrorCode
    const detail = error.apiErrorMessage ?? code
    // OpenFGA says "missing bearer token" or "unauthenticated"; either way the operator's fix is the token.
    const credentials =
      error.statusCode === 401 || error.statusCode === 403
        ? ': not authenticated, check platform.authz.openfga.api-token'
        : ''
    return `HTTP ${error.statusCode ?? '?'}${detail ? ` (${detail})` : ''}${credentials}`
  }
  return error instanceof Error ? error.message : String(error)
}

/** Maps an SDK error to the port's errors: AuthorizationRequestError only for a clear 400. */
export function translateOpenFgaError(error: unknown, operation: string): Error {
  if (error instanceof AuthorizationRequestError || error instanceof AuthorizationUnavailableError)
    return error
  if (
    error instanceof FgaApiValidationError &&
    error.statusCode === 400 &&
    !NOT_THE_CALLERS_FAULT.has(error.apiErrorCode)
  ) {
    return new AuthorizationRequestError(
      `OpenFGA rejected the ${operation}: ${error.apiErrorMessage ?? error.apiErrorCode ?? 'invalid request'}`,
    )
  }
  return new AuthorizationUnavailableError(`OpenFGA ${operation} failed: ${describeFailure(error)}`, {
    cause: error,
  })
}

/** Whether another attempt may succeed: the request did not reach a verdict. */
function isTransient(error: unknown): boolean {
  if (error instanceof FgaApiRateLimitExceededError || error instanceof FgaApiInternalError) return true
  if (error instanceof FgaApiError) {
    // 409: transaction conflict (AbortedMessageResponse); 422: throttled (UnprocessableContentMessageResponse).
    return error.statusCode === 409 || error.statusCode === 422
  }
  // A plain FgaError wraps a failure without a response: refused, reset, timed out.
  return error instanceof FgaError && !(error instanceof FgaValidationError)
}

function retryAfterMs(error: unknown): number | undefined {
  if (!(error instanceof FgaApiError)) return undefined
  const headers = (error.responseHeader ?? {}) as Record<string, unknown>
  const value = headers['retry-after'] ?? headers['Retry-After']
  const seconds = typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : undefined
  return seconds === undefined ? undefined : seconds * 1000
}

const keyOf = (t: TupleKey) => `${t.user}\n${t.relation}\n${t.object}`
const plain = (t: TupleKey): TupleKey => ({ user: t.user, relation: t.relation, object: t.object })

function unique(tuples: TupleKey[]): TupleKey[] {
  const seen = new Map<string, TupleKey>()
  for (const t of tuples) seen.set(keyOf(t), plain(t))
  return [...seen.values()]
}

export class OpenFgaAuthorization implements AuthorizationPort {
  readonly #client: OpenFgaClient
  readonly #agents: OpenFgaAgents
  readonly #modelId: string
  readonly #timeoutMs: number
  readonly #maxRetries: number
  readonly #minRetryWaitMs: number
  readonly #deadlineMs: number

  constructor(options: OpenFgaOptions) {
    if (!options.apiUrl) throw new ConfigError('platform.authz.openfga.api-url', 'is required')
    if (!options.storeId || !ULID.test(options.storeId)) {
      throw new ConfigError('platform.authz.openfga.store-id', 'is required: the ULID of an OpenFGA store')
    }
    // Pinned: a query without it would follow whatever model was written last.
    if (!options.modelId || !ULID.test(options.modelId)) {
      throw new ConfigError(
        'platform.authz.openfga.model-id',
        'is required: the ULID of an authorization model',
      )
    }
    this.#modelId = options.modelId
    this.#timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs
    this.#maxRetries = options.maxRetries ?? DEFAULTS.maxRetries
    this.#minRetryWaitMs = options.minRetryWaitMs ?? DEFAULTS.minRetryWaitMs
    this.#deadlineMs = options.deadlineMs ?? DEFAULTS.deadlineMs
    this.#agents = createOpenFgaAgents()
    this.#client = createOpenFgaClient(
      {
        apiUrl: options.apiUrl,
        apiToken: options.apiToken,
        timeoutMs: this.#timeoutMs,
        storeId: options.storeId,
        modelId: options.modelId,
      },
      this.#agents,
    )
  }

  /** Runs one SDK call with bounded retries; throws the port's errors only. */
  async #call<T>(operation: string, request: () => Promise<T>): Promise<T> {
    const started = performance.now()
    for (let attempt = 1; ; attempt++) {
      try {
        return await request()
      } catch (error) {
        if (attempt > this.#maxRetries || !isTransient(error)) throw translateOpenFgaError(error, operation)
        const backoff = this.#minRetryWaitMs * 2 ** (attempt - 1) * (1 + Math.random())
        const wait = Math.max(backoff, retryAfterMs(error) ?? 0)
        const elapsed = performance.now() - started
        if (elapsed + wait + this.#timeoutMs > this.#deadlineMs) throw translateOpenFgaError(error, operation)
        await sleep(wait)
      }
    }
  }

  async check(request: CheckRequest): Promise<boolean> {
    const { user, relation, object } = request
    // HIGHER_CONSISTENCY skips the server's check query and iterator caches, when it has them on.
    const options = request.fresh ? { consistency: ConsistencyPreference.HigherConsistency } : {}
    const response = await this.#call('check', () => this.#client.check({ user, relation, object }, options))
    return response.allowed === true
  }

  /**
   * Idempotent (`on_duplicate`/`on_missing: ignore`, OpenFGA >= 1.10). OpenFGA applies one Write
   * request atomically but accepts at most 100 tuples in it, so larger changes are sent in chunks
   * of 100, deletes first (an interruption then leaves less access, not more): they are not atomic
   * as a whole, and a failed call may have applied its first chunks. Retrying is safe.
   */
  async write(writes: TupleKey[], deletes: TupleKey[]): Promise<void> {
    const toWrite = unique(writes)
    const toDelete = unique(deletes)
    const deleted = new Set(toDelete.map(keyOf))
    const both = toWrite.find((t) => deleted.has(keyOf(t)))
    if (both) {
      throw new AuthorizationRequestError(
        `a tuple cannot be written and deleted at once: ${both.user} ${both.relation} ${both.object}`,
      )
    }
    const changes = [
      ...toDelete.map((tuple) => ({ tuple, remove: true })),
      ...toWrite.map((tuple) => ({ tuple, remove: false })),
    ]
    for (let start = 0; start < changes.length; start += OPENFGA_MAX_TUPLES_PER_WRITE) {
      const chunk = changes.slice(start, start + OPENFGA_MAX_TUPLES_PER_WRITE)
      const body = {
        writes: chunk.filter((c) => !c.remove).map((c) => c.tuple),
        deletes: chunk.filter((c) => c.remove).map((c) => c.tuple),
      }
      await this.#call('write', () =>
        this.#client.write(body, {
          conflict: {
            onDuplicateWrites: ClientWriteRequestOnDuplicateWrites.Ignore,
            onMissingDeletes: ClientWriteRequestOnMissingDeletes.Ignore,
          },
        }),
      )
    }
  }

  /** Reads the pinned model: proves the server answers and the store and model exist. */
  async ready(): Promise<void> {
    try {
      const response = await this.#call('readiness check', () => this.#client.readAuthorizationModel())
      if (response.authorization_model?.id !== this.#modelId) {
        throw new AuthorizationUnavailableError('OpenFGA did not return the configured authorization model')
      }
    } catch (error) {
      if (error instanceof AuthorizationUnavailableError) throw error
      throw new AuthorizationUnavailableError((error as Error).message, { cause: error })
    }
  }

  /** Closes the kept-alive connections; calls made afterwards open new ones. */
  async close(): Promise<void> {
    this.#agents.http.destroy()
    this.#agents.https.destroy()
  }
}
