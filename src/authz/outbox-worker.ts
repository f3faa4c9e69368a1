import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import type { Database } from '../db/schema.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../housekeeping/runner.ts'
import { type OutboxHandler, OutboxWorker, type OutboxWorkerOptions, retryDelayMs } from '../outbox/engine.ts'
import { acquireLease, releaseLease } from '../outbox/worker-leases.ts'
import {
  type AuthzOutboxRow,
  deferTupleChange,
  deleteProcessedTupleChanges,
  makeTupleChangesDue,
  markTupleChangesDelivered,
  pendingTupleChanges,
  setTupleChangeAside,
  tupleChangeBacklog,
} from './outbox-store.ts'
import { type AuthorizationPort, AuthorizationRequestError, type TupleKey } from './port.ts'

// The authorization kind of the outbox engine (src/outbox/engine.ts): queued tuple changes go to
// the authorization server in the order they were queued. One instance at a time holds the
// `authz_outbox` lease (so a write and a later delete of one tuple cannot overtake each other); no
// transaction is open while the server is called. A failing delivery is retried with the engine's
// backoff and holds back the changes queued after it; a change the model rejects is dead-lettered
// (set aside with its error) rather than blocking the queue.

const LEASE = 'authz_outbox'
const LEASE_MS = 30_000
const BATCH = 50
const FLUSH_RETRY_MS = 250

export interface AuthzOutboxWorkerDeps {
  db: Kysely<Database>
  port: AuthorizationPort
  clock: Clock
  log: Pick<FastifyBaseLogger, 'info' | 'warn' | 'error'>
  /** Wakes the worker when a change is queued on any instance (`DatabaseHandle.listen`). */
  listen?: OutboxWorkerOptions['listen']
  /** The retry jitter's source (tests pin it). */
  random?: () => number
}

const tupleKey = (row: AuthzOutboxRow): TupleKey => ({
  user: row.subject,
  relation: row.relation,
  object: row.object,
})

export class AuthzOutboxWorker extends OutboxWorker {
  readonly #db: Kysely<Database>
  readonly #clock: AuthzOutboxWorkerDeps['clock']

  constructor(deps: AuthzOutboxWorkerDeps) {
    super({ kind: 'authz', handler: new TupleDelivery(deps), log: deps.log, listen: deps.listen })
    this.#db = deps.db
    this.#clock = deps.clock
  }

  /**
   * Delivers until nothing is queued or `withinMs` has passed: first at once, whatever the backoff
   * of a change that failed before (an explicit delivery, such as a CLI command's, is the moment to
   * try), then as the backoff of a new failure allows (another instance may also hold the lease for
   * a moment). Resolves to what is still queued, with the last delivery error, so a caller such as
   * the CLI can say that its changes are not visible yet.
   */
  async flush(withinMs: number): Promise<{ pending: number; lastError: string | null }> {
    const deadline = Date.now() + withinMs
    await makeTupleChangesDue(this.#db, this.#clock.now())
    for (;;) {
      await this.runOnce()
      const backlog = await tupleChangeBacklog(this.#db)
      if (backlog.pending === 0 || Date.now() >= deadline) return backlog
      await new Promise((resolve) => setTimeout(resolve, FLUSH_RETRY_MS))
    }
  }

  /** Changes still waiting (for readiness diagnostics and tests). */
  async pending(): Promise<number> {
    return (await tupleChangeBacklog(this.#db)).pending
  }
}

class TupleDelivery implements OutboxHandler {
  readonly #deps: AuthzOutboxWorkerDeps
  readonly #holder = randomUUID()

  constructor(deps: AuthzOutboxWorkerDeps) {
    this.#deps = deps
  }

  #lease(now: Date): Promise<boolean> {
    return acquireLease(this.#deps.db, LEASE, this.#holder, now, new Date(now.getTime() + LEASE_MS))
  }

  async drain(stopping: () => boolean): Promise<number> {
    const { db, clock } = this.#deps
    if (!(await this.#lease(clock.now()))) return 0
    let applied = 0
    try {
      while (!stopping()) {
        const now = clock.now()
        // Renewed before every batch: a run that outlives its lease stops rather than race another
        // instance that has taken the lease over.
        if (!(await this.#lease(now))) break
        const pending = await pendingTupleChanges(db, BATCH)
        const head = pending[0]
        if (!head || head.next_attempt_at > now) break
        const batch = oneChangePerTuple(pending)
        try {
          await this.#deps.port.write(
            batch.filter((r) => r.operation === 'write').map(tupleKey),
            batch.filter((r) => r.operation === 'delete').map(tupleKey),
          )
          await markTupleChangesDelivered(
            db,
            batch.map((r) => r.id),
            now,
          )
          applied += batch.length
        } catch (caught) {
          let error = caught as Error
          if (error instanceof AuthorizationRequestError) {
            // Find the offending change: deliver one at a time; a server failure on the way backs off below.
            const single = await this.#deliverOneByOne(batch, now).catch(
              (failure: unknown) => failure as Error,
            )
            if (typeof single === 'number') {
              applied += single
              continue
            }
            error = single
          }
          const attempts = head.attempts + 1
          await deferTupleChange(db, head.id, {
            attempts,
            nextAttemptAt: new Date(now.getTime() + retryDelayMs(attempts, this.#deps.random)),
            error: error.message,
          })
          this.#deps.log.warn({ err: error, attempts }, 'authorization outbox delivery failed')
          break
        }
      }
    } finally {
      await releaseLease(db, LEASE, this.#holder)
    }
    return applied
  }

  async #deliverOneByOne(batch: AuthzOutboxRow[], now: Date): Promise<number> {
    let applied = 0
    for (const row of batch) {
      try {
        const key = tupleKey(row)
        await this.#deps.port.write(
          row.operation === 'write' ? [key] : [],
          row.operation === 'delete' ? [key] : [],
        )
        await markTupleChangesDelivered(this.#deps.db, [row.id], now)
        applied++
      } catch (error) {
        if (!(error instanceof AuthorizationRequestError)) throw error
        this.#deps.log.error(
          { err: error, outboxId: row.id },
          'authorization change rejected by the model; set aside',
        )
        await setTupleChangeAside(this.#deps.db, row.id, error.message, now)
      }
    }
    return applied
  }
}

/** The leading changes with no two of one tuple, so delivering them together keeps their order. */
function oneChangePerTuple(pending: AuthzOutboxRow[]): AuthzOutboxRow[] {
  const seen = new Set<string>()
  const batch = []
  for (const row of pending) {
    const key = `${row.subject}|${row.relation}|${row.object}`
    if (seen.has(key)) break
    seen.add(key)
    batch.push(row)
  }
  return batch
}

/**
 * Retention: a change delivered (or set aside) is kept `platform.retention.outbox`, then goes; a
 * pending one stays whatever its age.
 */
export function tupleOutboxRetention(config: Config): RetentionRule {
  const { outbox } = config.retention
  return {
    name: 'authz_outbox',
    sweep: (db, now) => deleteProcessedTupleChanges(db, secondsBefore(now, outbox), RETENTION_BATCH),
  }
}
