import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database } from '../db/schema.ts'
import { acquireLease, releaseLease } from '../outbox/worker-leases.ts'

/**
 * One retention rule: removes at most one small batch of rows that may go at `now` and returns how
 * many it removed. Rules are idempotent deletes, so instances running them at once only share work.
 */
export interface RetentionRule {
  readonly name: string
  sweep(db: Kysely<Database>, now: Date): Promise<number>
}

/** The rows a rule removes at most per sweep: small batches, so no sweep holds long locks. */
export const RETENTION_BATCH = 500

/** The cutoff of a retention window: `seconds` before `now`. */
export const secondsBefore = (now: Date, seconds: number) => new Date(now.getTime() - seconds * 1000)

export interface HousekeepingDeps {
  db: Kysely<Database>
  clock: Clock
  log: Pick<FastifyBaseLogger, 'warn'>
  rules: readonly RetentionRule[]
  /** Called with the rows each rule removed in a pass (metrics). */
  onRemoved?: (rule: string, count: number) => void
}

const INTERVAL_MS = 60_000
/** Batches per rule and run: a backlog drains over several runs instead of one long sweep. */
const MAX_BATCHES = 20
/** The pause before the next run while a rule still has a backlog (it hit MAX_BATCHES). */
const BACKLOG_INTERVAL_MS = 1_000
/** One instance at a time runs the rules; a run renews the lease before each rule. */
const LEASE = 'housekeeping'
const LEASE_MS = 5 * 60_000

/** Runs the retention rules periodically (and on demand), each in small batches. */
export class Housekeeping {
  readonly #deps: HousekeepingDeps
  readonly #holder = randomUUID()
  #timer: NodeJS.Timeout | undefined
  #stopped = true
  #backlog = false
  #running: Promise<Record<string, number>> | undefined

  constructor(deps: HousekeepingDeps) {
    this.#deps = deps
  }

  get rules(): readonly RetentionRule[] {
    return this.#deps.rules
  }

  /** One pass over every rule; returns the rows removed per rule. Concurrent calls share one pass. */
  runOnce(): Promise<Record<string, number>> {
    this.#running ??= this.#run().finally(() => {
      this.#running = undefined
    })
    return this.#running
  }

  async #run(): Promise<Record<string, number>> {
    const { db, clock, log, rules } = this.#deps
    const removed: Record<string, number> = {}
    const lease = () => {
      const now = clock.now()
      return acquireLease(db, LEASE, this.#holder, now, new Date(now.getTime() + LEASE_MS))
    }
    this.#backlog = false
    try {
      for (const rule of rules) {
        // Another instance runs the rules now (or took over a run that outlived its lease).
        if (!(await lease())) break
        removed[rule.name] = await this.#sweep(rule)
      }
    } finally {
      await releaseLease(db, LEASE, this.#holder).catch((error: unknown) =>
        log.warn({ err: error }, 'housekeeping lease release failed'),
      )
    }
    return removed
  }

  async #sweep(rule: RetentionRule): Promise<number> {
    const { db, clock, log } = this.#deps
    let total = 0
    try {
      for (let batch = 0; ; batch++) {
        if (batch === MAX_BATCHES) {
          this.#backlog = true
          break
        }
        const count = await rule.sweep(db, clock.now())
        total += count
        if (count === 0) break
      }
    } catch (error) {
      log.warn({ err: error, rule: rule.name }, 'housekeeping rule failed')
    }
    if (total > 0) this.#deps.onRemoved?.(rule.name, total)
    return total
  }

  /**
   * Runs every minute, and again after a second while a rule still has a backlog, so deletes keep
   * pace with traffic in small batches instead of one long sweep.
   */
  start(): void {
    if (!this.#stopped) return
    this.#stopped = false
    const next = (delay: number) => {
      if (this.#stopped) return
      this.#timer = setTimeout(() => {
        this.runOnce().then(
          () => next(this.#backlog ? BACKLOG_INTERVAL_MS : INTERVAL_MS),
          () => next(INTERVAL_MS),
        )
      }, delay)
      this.#timer.unref()
    }
    next(INTERVAL_MS)
  }

  async stop(): Promise<void> {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    await this.#running?.catch(() => undefined)
  }
}
