import http from 'node:http'
import https from 'node:https'
import { performance } from 'node:perf_hooks'
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import type { AuditTrail } from '../../audit/index.ts'
import type { Clock } from '../../clock.ts'
import { inTransaction } from '../../db/database.ts'
import type { Database, Tx } from '../../db/schema.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import { type OutboxHandler, OutboxWorker, type OutboxWorkerOptions } from '../../outbox/engine.ts'
import type { SecretBox } from '../../security/secret-box.ts'
import {
  checkWebhookUrl,
  guardedLookup,
  type Resolve,
  systemResolve,
  WebhookTargetRefused,
} from './address-guard.ts'
import { TEST_EVENT_TYPE } from './fan-out.ts'
import './notice.ts'
import {
  activeAdminEmails,
  claimMessages,
  type EndpointRow,
  endpointsByIds,
  lockEndpointState,
  type OutboxRow,
  recordAttempt,
  releaseMessage,
} from './repository.ts'
import { signatureHeader } from './signing.ts'
import type { AttemptOutcome, DisabledReason } from './tables.ts'

// The webhook kind of the outbox engine (src/outbox/engine.ts). A worker claims due messages with
// a lease (FOR UPDATE SKIP LOCKED), posts each outside any transaction, then records the attempt,
// the message's state and the endpoint's failure count in one transaction. A message keeps its
// webhook-id and body on every attempt; each attempt is signed afresh (its timestamp, and every
// secret in use then). Only a 2xx answer delivers; redirects are not followed; 410 Gone disables
// the endpoint; an endpoint that keeps failing is disabled and its organization's admins told.

/** Attempts before a message is dead-lettered: with webhookRetryDelayMs, about three days. */
export const WEBHOOK_MAX_ATTEMPTS = 12
const RETRY_BASE_MS = 30_000
const RETRY_MAX_MS = 12 * 60 * 60_000
const DEFAULT_BATCH_SIZE = 10
const ERROR_MAX = 300

/**
 * The wait after the n-th failed attempt: 30 s × 4^(n−1), at most 12 hours, within ±20 % (jitter,
 * so endpoints that failed together are not retried in step). The eleven waits add up to about
 * 71 hours. `random` is in [0, 1).
 */
export function webhookRetryDelayMs(failedAttempts: number, random: () => number = Math.random): number {
  const full = Math.min(RETRY_BASE_MS * 4 ** Math.max(failedAttempts - 1, 0), RETRY_MAX_MS)
  return Math.round(full * (0.8 + 0.4 * random()))
}

export interface WebhookDeliveryOptions {
  db: Kysely<Database>
  clock: Clock
  audit: AuditTrail
  /** Opens the endpoints' sealed secrets. */
  box: SecretBox
  log: Pick<FastifyBaseLogger, 'info' | 'warn' | 'error'>
  allowPrivateNetworks: boolean
  timeoutMs: number
  /** Consecutive failed attempts, over at least `disableAfterMs` without a success, that disable an endpoint. */
  disableAfterFailures: number
  disableAfterMs: number
  /** Resolves endpoint hosts (the system's resolver; tests give their own). */
  resolve?: Resolve
  listen?: OutboxWorkerOptions['listen']
  batchSize?: number
  leaseMs?: number
  pollIntervalMs?: number
  maxAttempts?: number
  random?: () => number
}

export class WebhookOutboxWorker extends OutboxWorker {
  constructor(options: WebhookDeliveryOptions) {
    super({
      kind: 'webhook',
      handler: new WebhookDelivery(options),
      log: options.log,
      listen: options.listen,
      pollIntervalMs: options.pollIntervalMs,
    })
  }
}

interface Answer {
  statusCode: number | null
  error: string | null
}

/** Posts a body; resolves with the status once the answer's head arrives (its body is not read). */
function post(
  url: URL,
  headers: Record<string, string>,
  body: string,
  options: { timeoutMs: number; lookup: ReturnType<typeof guardedLookup> },
): Promise<number> {
  return new Promise((resolve, reject) => {
    const client = url.protocol === 'https:' ? https : http
    const request = client.request(
      url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        lookup: options.lookup,
        agent: false,
        signal: AbortSignal.timeout(options.timeoutMs),
      },
      (response) => {
        resolve(response.statusCode ?? 0)
        response.destroy()
      },
    )
    request.on('error', reject)
    request.end(body)
  })
}

function describeError(error: unknown): string {
  if (error instanceof WebhookTargetRefused) return `refused: ${error.message}`
  const e = error as { name?: string; code?: string; message?: string }
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return 'timed out'
  return `${e?.code ? `${e.code}: ` : ''}${e?.message ?? String(error)}`.slice(0, ERROR_MAX)
}

class WebhookDelivery implements OutboxHandler {
  readonly #options: WebhookDeliveryOptions
  readonly #lookup: ReturnType<typeof guardedLookup>
  readonly #batchSize: number
  readonly #leaseMs: number
  readonly #maxAttempts: number

  constructor(options: WebhookDeliveryOptions) {
    this.#options = options
    this.#lookup = guardedLookup(options.resolve ?? systemResolve, options.allowPrivateNetworks)
    this.#batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE
    // Longer than a batch's attempts can take with the timeout, so a live worker keeps its rows.
    this.#leaseMs = options.leaseMs ?? Math.max(5 * 60_000, options.timeoutMs * 3)
    this.#maxAttempts = options.maxAttempts ?? WEBHOOK_MAX_ATTEMPTS
  }

  async drain(stopping: () => boolean): Promise<number> {
    const { db, clock } = this.#options
    let attempted = 0
    while (!stopping()) {
      const messages = await claimMessages(db, clock.now(), this.#leaseMs, this.#batchSize)
      const endpoints = new Map(
        (await endpointsByIds(db, [...new Set(messages.map((m) => m.endpoint_id))])).map((e) => [e.id, e]),
      )
      let released = false
      await Promise.all(
        messages.map(async (message) => {
          if (stopping()) {
            released = true
            await releaseMessage(db, message)
            return
          }
          const endpoint = endpoints.get(message.endpoint_id)
          // Deleted since the claim: its messages went with it.
          if (!endpoint) return
          await this.#deliver(message, endpoint)
          attempted += 1
        }),
      )
      if (released || messages.length < this.#batchSize) break
    }
    return attempted
  }

  /** The secrets a delivery is signed with now: the current one, and the rotated one for its last 24 h. */
  #secrets(endpoint: EndpointRow, now: Date): string[] {
    const { box } = this.#options
    const secrets = [box.open(endpoint.secret)]
    const expires = endpoint.previous_secret_expires_at as Date | null
    if (endpoint.previous_secret && expires && expires > now) secrets.push(box.open(endpoint.previous_secret))
    return secrets
  }

  async #send(message: OutboxRow, endpoint: EndpointRow): Promise<Answer> {
    const now = this.#options.clock.now()
    try {
      // The creation's check again (the flag may have been turned off since): address literals are
      // not resolved, so only here are they refused; names are checked by the connection's lookup.
      const url = checkWebhookUrl(endpoint.url, this.#options.allowPrivateNetworks)
      const timestamp = Math.floor(now.getTime() / 1000)
      const headers = {
        'content-type': 'application/json',
        'user-agent': 'platform-core-webhooks',
        'webhook-id': message.message_id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatureHeader(this.#secrets(endpoint, now), {
          id: message.message_id,
          timestamp,
          body: message.payload,
        }),
      }
      const statusCode = await post(url, headers, message.payload, {
        timeoutMs: this.#options.timeoutMs,
        lookup: this.#lookup,
      })
      const ok = statusCode >= 200 && statusCode < 300
      return {
        statusCode,
        error: ok
          ? null
          : statusCode >= 300 && statusCode < 400
            ? `redirect (${statusCode}) not followed`
            : `HTTP ${statusCode}`,
      }
    } catch (error) {
      return { statusCode: null, error: describeError(error) }
    }
  }

  async #deliver(message: OutboxRow, endpoint: EndpointRow): Promise<void> {
    const { clock, db, log } = this.#options
    const test = message.event_type === TEST_EVENT_TYPE
    const started = performance.now()
    const answer: Answer =
      endpoint.enabled || test
        ? await this.#send(message, endpoint)
        : { statusCode: null, error: 'endpoint disabled' }
    const durationMs = endpoint.enabled || test ? Math.round(performance.now() - started) : 0
    const attemptedAt = clock.now()
    const fields = { webhookId: endpoint.id, messageId: message.message_id, attempt: message.attempts }
    try {
      const disabled = await inTransaction(db, (trx) =>
        this.#record(trx, message, {
          ...answer,
          attemptedAt,
          durationMs,
          test,
          url: endpoint.url,
        }),
      )
      if (answer.error === null) log.info({ ...fields, status: answer.statusCode }, 'webhook delivered')
      else log.warn({ ...fields, status: answer.statusCode, error: answer.error }, 'webhook attempt failed')
      if (disabled) log.warn({ webhookId: endpoint.id, reason: disabled }, 'webhook endpoint disabled')
    } catch (error) {
      // Not recorded: the lease runs out and the message is attempted again (same webhook-id).
      log.error({ err: error, ...fields }, 'recording a webhook attempt failed')
    }
  }

  /** Records the attempt; returns the reason the endpoint was disabled by it, if it was. */
  async #record(
    trx: Tx,
    message: OutboxRow,
    attempt: Answer & { attemptedAt: Date; durationMs: number; test: boolean; url: string },
  ): Promise<DisabledReason | null> {
    const state = await lockEndpointState(trx, message.endpoint_id)
    if (!state) return null
    const { attemptedAt } = attempt
    const delivered = attempt.error === null
    let outcome: AttemptOutcome
    let disable: DisabledReason | null = null
    let nextAttemptAt: Date | undefined
    if (delivered) outcome = 'delivered'
    else if (!attempt.test && !state.enabled) outcome = 'endpoint_disabled'
    else if (attempt.test) outcome = 'dead_letter'
    else {
      if (attempt.statusCode === 410) disable = 'gone'
      else if (
        state.failures + 1 >= this.#options.disableAfterFailures &&
        (state.failingSince ?? attemptedAt).getTime() <= attemptedAt.getTime() - this.#options.disableAfterMs
      )
        disable = 'failing'
      if (disable) outcome = 'endpoint_disabled'
      else if (message.attempts >= this.#maxAttempts) outcome = 'dead_letter'
      else {
        outcome = 'retrying'
        nextAttemptAt = new Date(
          attemptedAt.getTime() + webhookRetryDelayMs(message.attempts, this.#options.random),
        )
      }
    }
    // A test ping changes nothing about its endpoint; a message for a disabled one was not sent.
    const endpointChange =
      attempt.test || (!delivered && !state.enabled)
        ? ({ kind: 'none' } as const)
        : delivered
          ? ({ kind: 'succeeded' } as const)
          : ({ kind: 'failed', disable } as const)
    const recorded = await recordAttempt(trx, {
      message,
      attemptedAt,
      statusCode: attempt.statusCode,
      durationMs: attempt.durationMs,
      error: attempt.error,
      outcome,
      ...(nextAttemptAt ? { nextAttemptAt } : {}),
      endpoint: endpointChange,
    })
    if (!recorded || !disable) return null
    await this.#disabled(trx, message, attempt.url, disable, attemptedAt)
    return disable
  }

  /** The endpoint was disabled by an attempt: the audit trail records it and the admins are told. */
  async #disabled(
    trx: Tx,
    message: OutboxRow,
    url: string,
    reason: DisabledReason,
    now: Date,
  ): Promise<void> {
    await this.#options.audit.record(trx, {
      type: 'webhook.disabled',
      organizationId: message.organization_id,
      actor: { type: 'system', id: null },
      subject: { type: 'webhook', id: message.endpoint_id },
      data: { reason },
    })
    for (const to of await activeAdminEmails(trx, message.organization_id))
      await enqueueMail(
        trx,
        {
          template: 'webhook_disabled',
          to,
          data: { url: new URL(url).origin, webhookId: message.endpoint_id, reason },
          organizationId: message.organization_id,
        },
        now,
      )
  }
}
