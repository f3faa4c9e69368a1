import type { FastifyBaseLogger } from 'fastify'
import { LISTEN_RESET } from '../db/notifications.ts'

// The one outbox engine (a side effect never rolls back or blocks a committed change).
// A change writes its outbox row in its own transaction; a worker delivers it afterwards. What
// every kind shares lives here: when to run (a poll, a wake-up on NOTIFY when a row is queued on
// any instance, a call), one run at a time per worker with a trailing run for calls that arrive
// during one, the retry policy, the dead-letter state, and logging an outage once. What differs
// lives in each kind's handler: how rows are claimed (mail: row leases, any order; authorization:
// one lease across instances, strict order), delivered and recorded.

/** The kinds of outbox; each has its table (`<kind>_outbox`). */
export type OutboxKind = 'mail' | 'authz' | 'webhook'

/** The channel the tables' insert triggers notify (migration 0018), with the table's name. */
export const OUTBOX_CHANNEL = 'outbox'

const BASE_RETRY_MS = 2_000
const MAX_RETRY_MS = 5 * 60_000
const DEFAULT_POLL_MS = 1_000

/**
 * The wait after the n-th failed attempt: 2 s × 2^(n−1), at most 5 minutes, of which a random
 * half is taken off (equal jitter), so instances and rows that failed together do not retry in step.
 * `random` is in [0, 1): 0 waits the full delay.
 */
export function retryDelayMs(failedAttempts: number, random: () => number = Math.random): number {
  const full = Math.min(BASE_RETRY_MS * 2 ** Math.max(failedAttempts - 1, 0), MAX_RETRY_MS)
  return Math.round(full - (full / 2) * random())
}

/** The per-kind half of a worker. */
export interface OutboxHandler {
  /**
   * Claims and delivers what is due; resolves to the number of rows attempted. Once `stopping()`
   * is true it finishes the row in hand and gives back what it claimed but has not started.
   */
  drain(stopping: () => boolean): Promise<number>
  /** Called once a stopped worker has no run in flight: persist what is held in memory. */
  stopped?(): Promise<void>
}

export interface OutboxWorkerOptions {
  kind: OutboxKind
  handler: OutboxHandler
  log: Pick<FastifyBaseLogger, 'info' | 'error'>
  /** Subscribes to a NOTIFY channel (`DatabaseHandle.listen`); without it the worker only polls. */
  listen?:
    | ((channel: string, onMessage: (payload: string) => void) => Promise<() => Promise<void>>)
    | undefined
  pollIntervalMs?: number
}

/** Runs one kind's handler: on a timer, when a row is queued, and when asked. */
export class OutboxWorker {
  readonly kind: OutboxKind
  readonly #options: OutboxWorkerOptions
  #running: Promise<number> | undefined
  #again: Promise<number> | undefined
  #timer: NodeJS.Timeout | undefined
  #unlisten: (() => Promise<void>) | undefined
  #failing = false
  #stopping = false

  constructor(options: OutboxWorkerOptions) {
    this.kind = options.kind
    this.#options = options
  }

  /**
   * Delivers what is due now; resolves to the number of rows attempted. A call during a run waits
   * for it and then runs once more (shared by every call that arrived meanwhile), so what was
   * queued before the call is always looked at.
   */
  runOnce(): Promise<number> {
    if (!this.#running) {
      this.#running = this.#options.handler
        .drain(() => this.#stopping)
        .finally(() => {
          this.#running = undefined
        })
      return this.#running
    }
    this.#again ??= this.#running
      .catch(() => 0)
      .then(() => {
        this.#again = undefined
        return this.runOnce()
      })
    return this.#again
  }

  /** Runs now without throwing; a failure is logged once per outage and the rows stay queued. */
  async kick(): Promise<void> {
    try {
      await this.runOnce()
      if (this.#failing) this.#options.log.info({ outbox: this.kind }, 'outbox delivery resumed')
      this.#failing = false
    } catch (error) {
      if (!this.#failing) this.#options.log.error({ err: error, outbox: this.kind }, 'outbox run failed')
      this.#failing = true
    }
  }

  /** Delivers what is already queued, then polls and listens; the timer does not keep the process alive. */
  async start(): Promise<void> {
    if (this.#timer) return
    this.#stopping = false
    this.#timer = setInterval(() => {
      if (!this.#running) void this.kick()
    }, this.#options.pollIntervalMs ?? DEFAULT_POLL_MS)
    this.#timer.unref()
    const table = `${this.kind}_outbox`
    this.#unlisten = await this.#options.listen?.(OUTBOX_CHANNEL, (payload) => {
      // A reconnected listener may have missed notifications: look anyway.
      if (payload === table || payload === LISTEN_RESET) void this.kick()
    })
    void this.kick()
  }

  /** Stops polling and listening, waits for the run in flight, then lets the handler persist. */
  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#stopping = true
    await this.#unlisten?.()
    this.#unlisten = undefined
    await Promise.allSettled([this.#running, this.#again])
    await this.#options.handler.stopped?.().catch(() => undefined)
  }
}
