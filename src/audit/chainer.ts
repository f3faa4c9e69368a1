import { AsyncResource } from 'node:async_hooks'
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import { inTransaction } from '../db/database.ts'
import type { Database, Tx } from '../db/schema.ts'
import { type ChainKeys, chainHash } from './chain.ts'
import {
  type ChainHead,
  chainsWithUnchained,
  hasUnchained,
  type LinkedEvent,
  linkEvents,
  lockChainHeads,
  unchainedEvents,
} from './repository.ts'
import type { AuditFanOut, ChainNudge } from './trail.ts'

/** Events of one chain a chaining transaction links at most; a longer backlog takes several. */
const CHAIN_BATCH = 500
/** Chains one chaining transaction takes on at most. */
const CHAINS_PER_RUN = 100
/** How long a nudge waits before the run, so that the writes of that moment make one batch. */
const NUDGE_DELAY_MS = 50
/** How often each instance looks for events nobody chained (their writer stopped before it could). */
const SWEEP_MS = 1_000
/** Chains one sweep takes on at most. */
const SWEEP_CHAINS = 100

/**
 * Links and hashes committed audit events off the request path. A writer inserts its event without
 * a place in its chain (AuditTrail) and, once its transaction commits, nudges the chainer of its
 * instance, which notes the chain. A run then takes every chain noted so far in one transaction:
 * it locks their heads (in the order of their names), reads their unchained events in the order
 * they were written, numbers each chain's after its head, hashes each onto the one before, and
 * stores places, heads and webhook messages (the fan-out) in one statement. So an organization's
 * writes never wait for each other, a chain's lock is held only by a chainer, once per run, however
 * many writers there are, and a run costs the same few statements for one event or hundreds of
 * many organizations.
 *
 * One run at a time in an instance, and one more pending behind it for whatever was nudged
 * meanwhile; a nudged run waits a few milliseconds first. Other instances' chainers take the same
 * row locks, so a chain is linked by one transaction at a time in the whole deployment, and what one
 * linked the next no longer sees as unchained. An event whose writer stopped before nudging (a
 * crash, a test's own transaction) is found by the sweep every instance runs each second. Nothing is
 * lost: the event was committed by its writer, and a chaining transaction that fails leaves it
 * unchained for the sweep.
 */
export class AuditChainer implements ChainNudge {
  readonly #db: Kysely<Database>
  readonly #keys: ChainKeys
  readonly #fanOut: AuditFanOut | undefined
  readonly #log: FastifyBaseLogger | undefined
  /** Chains nudged (or found by a sweep, or settled) that no run has taken yet. */
  readonly #noted = new Set<string>()
  #running: Promise<void> | undefined
  #pending: Promise<void> | undefined
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
    this.#noted.add(chain)
    this.#runSoon(NUDGE_DELAY_MS).catch(() => {})
  }

  /**
   * Chains every event of `chain` committed before the call (a reader that must see its own writes
   * in the chain: the audit list and export). Rejects when the database does.
   */
  async settle(chain: string): Promise<void> {
    const busy = this.#running || this.#pending || this.#noted.has(chain)
    if (!busy && !(await hasUnchained(this.#db, chain))) return
    this.#noted.add(chain)
    await this.#runSoon(0)
  }

  /** Runs and pending runs, all finished (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.#running || this.#pending || this.#sweeping) {
      await Promise.allSettled([this.#running, this.#pending, this.#sweeping])
    }
  }

  /** Chains whatever is unchained now, in every chain, and waits until it is (tests). */
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

  /** Chains every chain that has unchained events (the sweep). */
  async sweep(): Promise<void> {
    let chains: string[]
    try {
      chains = await chainsWithUnchained(this.#db, SWEEP_CHAINS)
    } catch (error) {
      this.#failed(error)
      return
    }
    if (chains.length === 0) return
    for (const chain of chains) this.#noted.add(chain)
    await this.#runSoon(0).catch(() => {})
  }

  /**
   * The next run: the one pending if there is one (it has not taken the noted chains yet, so it
   * takes whatever was noted before it starts), else one that starts after the run under way, or
   * after `delayMs` (a nudge waits a moment, so that a burst of writes is chained in one run).
   */
  #runSoon(delayMs: number): Promise<void> {
    if (this.#pending) return this.#pending
    const running = this.#running
    const ready = running
      ? running.catch(() => {})
      : delayMs > 0
        ? new Promise<void>((resolve) => setTimeout(resolve, delayMs))
        : Promise.resolve()
    const next = ready.then(() => {
      this.#pending = undefined
      const run = this.#scope
        .runInAsyncScope(() => this.#chainNoted())
        .finally(() => {
          if (this.#running === run) this.#running = undefined
        })
      this.#running = run
      return run
    })
    this.#pending = next
    return next
  }

  /** Takes the noted chains, CHAINS_PER_RUN at a time, until none is left. */
  async #chainNoted(): Promise<void> {
    try {
      while (this.#noted.size > 0) {
        const chains = [...this.#noted].slice(0, CHAINS_PER_RUN)
        for (const chain of chains) this.#noted.delete(chain)
        const backlog = await inTransaction(this.#db, (trx) => this.#chainBatch(trx, chains))
        // A chain with more than a batch of events is taken again.
        for (const chain of backlog) this.#noted.add(chain)
      }
      this.#failing = false
    } catch (error) {
      // What the failed run took is left to the sweep, which tries again each second.
      this.#failed(error)
      throw error
    }
  }

  /** Chains a batch of each chain's events; returns the chains that have more. */
  async #chainBatch(trx: Tx, chains: string[]): Promise<string[]> {
    const heads = await lockChainHeads(trx, chains)
    const events = await unchainedEvents(trx, chains, CHAIN_BATCH)
    if (events.length === 0) return []
    const keyId = this.#keys.currentId
    const moved = new Map<string, ChainHead>()
    const counts = new Map<string, number>()
    const linked = events.map((event): LinkedEvent => {
      const head = moved.get(event.chain) ?? heads.get(event.chain)
      if (!head) throw new Error(`audit chain ${event.chain} has no locked head`)
      const placed = { ...event, sequence: head.sequence + 1 }
      const hash = chainHash(this.#keys.current, head.hash, placed)
      moved.set(event.chain, { chain: event.chain, sequence: placed.sequence, hash })
      counts.set(event.chain, (counts.get(event.chain) ?? 0) + 1)
      return { ...placed, keyId, previousHash: head.hash, hash }
    })
    const count = await linkEvents(trx, linked, [...moved.values()], this.#fanOut?.(linked) ?? null)
    // The chains' locks are held, so nobody else linked these: a shortfall is a bug, never a race.
    if (count !== linked.length) throw new Error(`audit chains: linked ${count} of ${linked.length} events`)
    return [...counts].filter(([, n]) => n === CHAIN_BATCH).map(([chain]) => chain)
  }

  /** Logs the first failure of a streak (the database is down: the sweep tries again each second). */
  #failed(error: unknown): void {
    if (this.#failing) return
    this.#failing = true
    this.#log?.warn({ err: error }, 'audit events could not be chained yet; trying again')
  }
}
