import { AsyncResource } from 'node:async_hooks'
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import { inTransaction } from '../db/database.ts'
import type { Database, Tx } from '../db/schema.ts'
import { type ChainKeys, chainHash } from './chain.ts'
import {
  chainsWithUnchained,
  hasUnchained,
  type LinkedEvent,
  linkEvents,
  lockChainHead,
  unchainedEvents,
} from './repository.ts'
import type { AuditFanOut, ChainNudge } from './trail.ts'

/** Events a chaining transaction links at most; a longer backlog takes several. */
const CHAIN_BATCH = 500
/** How long a nudged chain waits before its run, so that the writes of that moment make one batch. */
const NUDGE_DELAY_MS = 10
/** How often each instance looks for events nobody chained (their writer stopped before it could). */
const SWEEP_MS = 1_000
/** Chains one sweep takes on at most. */
const SWEEP_CHAINS = 100

/**
 * Links and hashes committed audit events, one chain at a time, off the request path. A writer
 * inserts its event without a place in the chain (AuditTrail) and, once its transaction commits,
 * nudges the chainer of its instance; the chainer then takes the chain head's row lock, reads the
 * chain's unchained events in the order they were written, numbers them after the head, hashes each
 * onto the one before, and stores places, head and webhook messages (the fan-out) in one statement
 * of one transaction. So an organization's writes never wait for each other, and the chain's lock
 * is held only by the chainer, once per batch, however many writers there are.
 *
 * Per chain, one run at a time in an instance, and one more pending behind it for whatever was
 * nudged meanwhile; a nudged run waits a few milliseconds first. So a burst of writes is chained in
 * a few batches, not one transaction each. Other
 * instances' chainers take the same row lock, so a chain is linked by one transaction at a time in
 * the whole deployment, and what one linked the next no longer sees as unchained. An event whose
 * writer stopped before nudging (a crash, the CLI, a test's own transaction) is found by the sweep
 * every instance runs each second. Nothing is lost: the event was committed by its writer, and a
 * chaining transaction that fails leaves it unchained for the next run.
 */
export class AuditChainer implements ChainNudge {
  readonly #db: Kysely<Database>
  readonly #keys: ChainKeys
  readonly #fanOut: AuditFanOut | undefined
  readonly #log: FastifyBaseLogger | undefined
  readonly #running = new Map<string, Promise<void>>()
  readonly #pending = new Map<string, Promise<void>>()
  #timer: NodeJS.Timeout | undefined
  #sweeping: Promise<void> | undefined
  #stopped = false
  #failing = false
  /**
   * The context runs start in: the chainer's own, not the request whose commit nudged it (its
   * tenant, origin and log bindings are not the chainer's business, and its work is not the request's).
   */
  readonly #scope = new AsyncResource('AuditChainer')

  constructor(deps: {
    db: Kysely<Database>
    keys: ChainKeys
    fanOut?: AuditFanOut
    log?: FastifyBaseLogger
  }) {
    this.#db = deps.db
    this.#keys = deps.keys
    this.#fanOut = deps.fanOut
    this.#log = deps.log
  }

  /** A transaction that recorded events of `chain` committed: chain them soon. */
  nudge(chain: string): void {
    if (this.#stopped) return
    this.#runSoon(chain, NUDGE_DELAY_MS).catch(() => {})
  }

  /**
   * Chains every event of `chain` committed before the call (a reader that must see its own writes
   * in the chain: the audit list and export). Rejects when the database does.
   */
  async settle(chain: string): Promise<void> {
    if (!this.#running.has(chain) && !this.#pending.has(chain) && !(await hasUnchained(this.#db, chain)))
      return
    await this.#runSoon(chain, 0)
  }

  /** Runs and pending runs, all finished (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.#running.size > 0 || this.#pending.size > 0 || this.#sweeping) {
      await Promise.allSettled([...this.#running.values(), ...this.#pending.values(), this.#sweeping])
    }
  }

  /** Chains whatever is unchained now, in every chain, and waits until it is (tests, the CLI). */
  async drain(): Promise<void> {
    await this.idle()
    await this.sweep()
    await this.idle()
  }

  /** Starts the sweep (the instance serves). */
  start(): void {
    this.#stopped = false
    if (this.#timer) return
    this.#timer = setInterval(() => {
      if (!this.#sweeping) this.#sweeping = this.sweep().finally(() => (this.#sweeping = undefined))
    }, SWEEP_MS)
    this.#timer.unref()
  }

  /** Stops the sweep and waits for the runs under way, so what was nudged is chained before close. */
  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    await this.idle()
    this.#stopped = true
  }

  /** Chains every chain that has unchained events (the sweep; `audit chain` in the CLI). */
  async sweep(): Promise<void> {
    let chains: string[]
    try {
      chains = await chainsWithUnchained(this.#db, SWEEP_CHAINS)
    } catch (error) {
      this.#failed(error)
      return
    }
    await Promise.allSettled(chains.map((chain) => this.#runSoon(chain, 0)))
  }

  /**
   * The next run of `chain`: the one pending if there is one (it has not read the chain yet, so it
   * takes whatever committed before it starts), else one that starts after the run under way, or
   * after `delayMs` (a nudge waits a moment, so that a burst of writes is chained in one batch).
   */
  #runSoon(chain: string, delayMs: number): Promise<void> {
    const pending = this.#pending.get(chain)
    if (pending) return pending
    const running = this.#running.get(chain)
    const ready = running
      ? running.catch(() => {})
      : delayMs > 0
        ? new Promise<void>((resolve) => setTimeout(resolve, delayMs))
        : Promise.resolve()
    const next = ready.then(() => {
      this.#pending.delete(chain)
      return this.#start(chain)
    })
    this.#pending.set(chain, next)
    return next
  }

  #start(chain: string): Promise<void> {
    const run = this.#scope
      .runInAsyncScope(() => this.#chainAll(chain))
      .finally(() => {
        if (this.#running.get(chain) === run) this.#running.delete(chain)
      })
    this.#running.set(chain, run)
    return run
  }

  async #chainAll(chain: string): Promise<void> {
    try {
      for (;;) {
        const linked = await inTransaction(this.#db, (trx) => this.#chainBatch(trx, chain))
        if (linked < CHAIN_BATCH) break
      }
      this.#failing = false
    } catch (error) {
      this.#failed(error)
      throw error
    }
  }

  async #chainBatch(trx: Tx, chain: string): Promise<number> {
    const head = await lockChainHead(trx, chain)
    const events = await unchainedEvents(trx, chain, CHAIN_BATCH)
    if (events.length === 0) return 0
    let { sequence, hash: previousHash } = head
    const keyId = this.#keys.currentId
    const stored = events.map((event): LinkedEvent => {
      const placed = { ...event, sequence: ++sequence }
      const hash = chainHash(this.#keys.current, previousHash, placed)
      const linked = { ...placed, keyId, previousHash, hash }
      previousHash = hash
      return linked
    })
    const linked = await linkEvents(trx, chain, stored, this.#fanOut?.(stored) ?? null)
    // The chain's lock is held, so nobody else linked these: a shortfall is a bug, never a race.
    if (linked !== stored.length)
      throw new Error(`audit chain ${chain}: linked ${linked} of ${stored.length} events`)
    return stored.length
  }

  /** Logs the first failure of a streak (the database is down: the sweep tries again each second). */
  #failed(error: unknown): void {
    if (this.#failing) return
    this.#failing = true
    this.#log?.warn({ err: error }, 'audit events could not be chained yet; trying again')
  }
}
