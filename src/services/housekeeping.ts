import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database } from '../db/schema.ts'

/**
 * One retention rule: removes at most one small batch of rows that may go at `now` and returns how
 * many it removed. Rules are idempotent deletes, so instances running them at once only share work.
 */
export interface RetentionRule {
  readonly name: string
  sweep(db: Kysely<Database>, now: Date): Promise<number>
}

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

/** Runs the retention rules periodically (and on demand), each in small batches. */
export class Housekeeping {
  readonly #deps: HousekeepingDeps
  #timer: NodeJS.Timeout | undefined
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
    for (const rule of rules) {
      let total = 0
      try {
        for (let batch = 0; batch < MAX_BATCHES; batch++) {
          const count = await rule.sweep(db, clock.now())
          total += count
          if (count === 0) break
        }
      } catch (error) {
        log.warn({ err: error, rule: rule.name }, 'housekeeping rule failed')
      }
      removed[rule.name] = total
      if (total > 0) this.#deps.onRemoved?.(rule.name, total)
    }
    return removed
  }

  start(): void {
    this.#timer ??= setInterval(() => void this.runOnce(), INTERVAL_MS)
    this.#timer.unref()
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.#running?.catch(() => undefined)
  }
}
