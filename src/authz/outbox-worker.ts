import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { type Kysely, sql } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database } from '../db/schema.ts'
import { type AuthorizationPort, AuthorizationRequestError, type TupleKey } from './port.ts'

const LEASE_MS = 30_000
const BATCH = 50
const MAX_BACKOFF_MS = 5 * 60_000
const POLL_MS = 1_000
const FLUSH_RETRY_MS = 250

export interface AuthzOutboxWorkerDeps {
  db: Kysely<Database>
  port: AuthorizationPort
  clock: Clock
  log: Pick<FastifyBaseLogger, 'warn' | 'error'>
}

const tupleKey = (row: { subject: string; relation: string; object: string }): TupleKey => ({
  user: row.subject,
  relation: row.relation,
  object: row.object,
})

/**
 * Delivers queued tuple changes to the authorization server, in the order they were queued. One
 * instance at a time holds the `authz_outbox` lease (so a write and a later delete of one tuple
 * cannot overtake each other); no transaction is open while the server is called. A failing
 * delivery is retried with backoff and holds back the changes queued after it; a change the model
 * rejects is set aside with its error rather than blocking the queue.
 */
export class AuthzOutboxWorker {
  readonly #deps: AuthzOutboxWorkerDeps
  readonly #holder = randomUUID()
  #timer: NodeJS.Timeout | undefined
  #running: Promise<number> | undefined

  constructor(deps: AuthzOutboxWorkerDeps) {
    this.#deps = deps
  }

  async #acquireLease(now: Date): Promise<boolean> {
    const row = await this.#deps.db
      .updateTable('worker_leases')
      .set({ holder: this.#holder, lease_until: new Date(now.getTime() + LEASE_MS) })
      .where('name', '=', 'authz_outbox')
      .where((eb) => eb.or([eb('lease_until', '<', now), eb('holder', '=', this.#holder)]))
      .returning('name')
      .executeTakeFirst()
    return row !== undefined
  }

  async #releaseLease(): Promise<void> {
    await this.#deps.db
      .updateTable('worker_leases')
      .set({ lease_until: sql`'epoch'` })
      .where('name', '=', 'authz_outbox')
      .where('holder', '=', this.#holder)
      .execute()
  }

  /** Delivers what is due now; returns how many changes were applied. Concurrent calls share one run. */
  runOnce(): Promise<number> {
    this.#running ??= this.#run().finally(() => {
      this.#running = undefined
    })
    return this.#running
  }

  async #run(): Promise<number> {
    const { db, clock } = this.#deps
    if (!(await this.#acquireLease(clock.now()))) return 0
    let applied = 0
    try {
      for (;;) {
        const now = clock.now()
        // Renewed before every batch: a run that outlives its lease stops rather than race another
        // instance that has taken the lease over.
        if (!(await this.#acquireLease(now))) break
        const pending = await db
          .selectFrom('authz_outbox')
          .selectAll()
          .where('processed_at', 'is', null)
          .orderBy('id')
          .limit(BATCH)
          .execute()
        const head = pending[0]
        if (!head || head.next_attempt_at > now) break
        // A batch never holds two changes of one tuple, so their order is kept.
        const seen = new Set<string>()
        const batch = []
        for (const row of pending) {
          const key = `${row.subject}|${row.relation}|${row.object}`
          if (seen.has(key)) break
          seen.add(key)
          batch.push(row)
        }
        const ids = batch.map((r) => r.id)
        try {
          await this.#deps.port.write(
            batch.filter((r) => r.operation === 'write').map(tupleKey),
            batch.filter((r) => r.operation === 'delete').map(tupleKey),
          )
          await db
            .updateTable('authz_outbox')
            .set({ processed_at: now, last_error: null })
            .where('id', 'in', ids)
            .execute()
          applied += batch.length
        } catch (caught) {
          let error = caught as Error
          if (error instanceof AuthorizationRequestError) {
            if (batch.length === 1) {
              await this.#setAside(head.id, error, now)
              continue
            }
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
          const delay = Math.min(1000 * 2 ** head.attempts, MAX_BACKOFF_MS)
          await db
            .updateTable('authz_outbox')
            .set({
              attempts: head.attempts + 1,
              next_attempt_at: new Date(now.getTime() + delay),
              last_error: (error as Error).message.slice(0, 500),
            })
            .where('id', '=', head.id)
            .execute()
          this.#deps.log.warn(
            { err: error, attempts: head.attempts + 1 },
            'authorization outbox delivery failed',
          )
          break
        }
      }
    } finally {
      await this.#releaseLease()
    }
    return applied
  }

  async #deliverOneByOne(
    batch: { id: string; operation: 'write' | 'delete'; subject: string; relation: string; object: string }[],
    now: Date,
  ) {
    let applied = 0
    for (const row of batch) {
      try {
        const key = tupleKey(row)
        await this.#deps.port.write(
          row.operation === 'write' ? [key] : [],
          row.operation === 'delete' ? [key] : [],
        )
        await this.#deps.db
          .updateTable('authz_outbox')
          .set({ processed_at: now })
          .where('id', '=', row.id)
          .execute()
        applied++
      } catch (error) {
        if (!(error instanceof AuthorizationRequestError)) throw error
        await this.#setAside(row.id, error, now)
      }
    }
    return applied
  }

  async #setAside(id: string, error: Error, now: Date): Promise<void> {
    this.#deps.log.error(
      { err: error, outboxId: id },
      'authorization change rejected by the model; set aside',
    )
    await this.#deps.db
      .updateTable('authz_outbox')
      .set({ processed_at: now, last_error: `rejected: ${error.message.slice(0, 480)}` })
      .where('id', '=', id)
      .execute()
  }

  /** Delivers now what was just queued (best effort: failures stay queued for the poller). */
  async kick(): Promise<void> {
    try {
      await this.runOnce()
    } catch (error) {
      this.#deps.log.warn({ err: error }, 'authorization outbox delivery failed')
    }
  }

  /** Delivers what is queued at once (what a previous process left), then polls. */
  start(): void {
    if (this.#timer) return
    void this.kick()
    this.#timer = setInterval(() => void this.kick(), POLL_MS)
    this.#timer.unref()
  }

  /**
   * Delivers until nothing is queued or `withinMs` has passed (another instance may hold the lease
   * for a moment, and a failed delivery waits for its backoff); resolves to what is still queued,
   * with the last delivery error, so a caller such as the CLI can say that its changes are not
   * visible yet.
   */
  async flush(withinMs: number): Promise<{ pending: number; lastError: string | null }> {
    const deadline = Date.now() + withinMs
    for (;;) {
      await this.runOnce()
      const row = await this.#deps.db
        .selectFrom('authz_outbox')
        .select((eb) => [eb.fn.countAll<string>().as('n'), eb.fn.max('last_error').as('lastError')])
        .where('processed_at', 'is', null)
        .executeTakeFirstOrThrow()
      const pending = Number(row.n)
      if (pending === 0 || Date.now() >= deadline) return { pending, lastError: row.lastError ?? null }
      await new Promise((resolve) => setTimeout(resolve, FLUSH_RETRY_MS))
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.#running?.catch(() => 0)
  }

  /** Changes still waiting (for readiness diagnostics and tests). */
  async pending(): Promise<number> {
    const row = await this.#deps.db
      .selectFrom('authz_outbox')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('processed_at', 'is', null)
      .executeTakeFirstOrThrow()
    return Number(row.n)
  }
}
