import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import type { PGlite } from '@electric-sql/pglite'
import { Kysely, type PGlite as KyselyPGlite, PGliteDialect, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { type Config, ConfigError } from '../config.ts'
import { AppError } from '../errors.ts'
import { abandoned, committed } from './after-commit.ts'
import { EmbeddedDatabaseBusyError, holderAddress, serveHeld, tryLock, unlock } from './embedded-holder.ts'
import { FifoLock } from './fifo-lock.ts'
import { listenReaches, postgresNotifications } from './notifications.ts'
import type { Database, Tx } from './schema.ts'

export interface PoolStats {
  total: number
  idle: number
  waiting: number
  max: number
}

/** An open database: the Kysely instance plus what the app needs to observe and close it. */
export interface DatabaseHandle {
  readonly db: Kysely<Database>
  readonly kind: 'postgres' | 'pglite'
  stats(): PoolStats
  /**
   * Subscribes to NOTIFY on `channel` (sent with `notify`, src/db/notifications.ts); resolves once
   * listening, to a function that stops. Besides payloads, `onMessage` receives LISTEN_LOST when
   * notifications may be missed from now on and LISTEN_RESET when they flow again after a
   * reconnect: drop every cached value on both.
   */
  listen(channel: string, onMessage: (payload: string) => void): Promise<() => Promise<void>>
  /**
   * True when a notification sent through the pool reaches a connection opened the way the LISTEN
   * connection is (`listenReaches`, src/db/notifications.ts) within `timeoutMs`: false behind a
   * transaction pooler, or when the two URLs name different databases.
   */
  listenReachable(timeoutMs?: number): Promise<boolean>
  close(): Promise<void>
}

// int8 (counts, sums) stays a string on both drivers, so embedded and real behave alike.
const INT8_OID = 20

export interface PostgresOptions {
  poolSize?: number
  /**
   * Called for errors of idle pooled clients (a server restart), which would otherwise crash the
   * process, and of LISTEN connections (which then reconnect).
   */
  onIdleError?: (error: Error) => void
  /**
   * Prepare each distinct parameterized statement once per connection (default true): PostgreSQL
   * then parses and plans it once, not on every execution. Off for a pooler that does not keep
   * named statements (PgBouncer in transaction mode before 1.21).
   */
  preparedStatements?: boolean
  /** Where the LISTEN connection goes (straight to PostgreSQL); default the pool's URL. */
  listenUrl?: string
}

/** The most statements one connection prepares; a text beyond them runs unnamed, as before. */
const PREPARED_PER_CONNECTION = 500

/**
 * PostgreSQL refuses to run a prepared statement whose result columns changed since it was
 * prepared (a migration added a column to a table a `select *` reads). Prepared again, it runs.
 */
export function isStalePreparedStatement(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error as { code?: unknown }).code === '0A000' &&
    error.message.includes('cached plan must not change result type')
  )
}

/**
 * A pg client that names every parameterized statement it is given as text (what Kysely sends),
 * one name per distinct text on this connection, so PostgreSQL keeps it parsed and planned. pg
 * parses a named statement on its first use on a connection and binds it afterwards; a text that
 * failed to parse is parsed again next time. A statement gone stale under a schema change is
 * prepared again under a new name: at once when no transaction is open, otherwise by the retry of
 * the whole unit of work (`inTransaction`).
 */
class PreparingClient extends pg.Client {
  readonly #names = new Map<string, string>()
  #next = 0

  // biome-ignore lint/suspicious/noExplicitAny: pg's query has a dozen overloads; this one only forwards
  override query(...args: any[]): any {
    const [text, values, callback] = args
    const prepared =
      typeof text === 'string' && Array.isArray(values) && values.length > 0 && callback === undefined
    const name = prepared ? this.#nameOf(text) : undefined
    if (name === undefined) return Reflect.apply(super.query, this, args)
    return super.query({ name, text, values }).catch((error: unknown) => {
      if (!isStalePreparedStatement(error)) throw error
      this.#names.delete(text)
      if (this.getTransactionStatus() !== 'I') throw error
      return this.query(text, values)
    })
  }

  #nameOf(text: string): string | undefined {
    let name = this.#names.get(text)
    if (name === undefined && this.#names.size < PREPARED_PER_CONNECTION) {
      name = `platform_${this.#next++}`
      this.#names.set(text, name)
    }
    return name
  }
}

export function openPostgres(url: string, options: PostgresOptions = {}): DatabaseHandle {
  const max = options.poolSize ?? 10
  const pool = new pg.Pool({
    ...(options.preparedStatements === false ? {} : { Client: PreparingClient }),
    connectionString: url,
    max,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    application_name: 'platform-core',
    // A runaway query must not hold a pooled connection forever.
    statement_timeout: 30_000,
    idle_in_transaction_session_timeout: 60_000,
  })
  pool.on('error', (error) => options.onIdleError?.(error))
  // A connection that breaks while checked out (the server stops, the network resets it) emits
  // 'error' on its client, which pg-pool only listens to while the client is idle: unheard, it
  // would end the process. The query in flight fails on its own (503), and the pool replaces the
  // client, so the event only needs a listener (found by test/reliability/postgres-outage.test.ts).
  pool.on('connect', (client) => {
    client.on('error', (error) => options.onIdleError?.(error))
  })
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) })
  // One LISTEN connection for all channels, opened by the first subscriber.
  const listenUrl = options.listenUrl ?? url
  const notifications = postgresNotifications(listenUrl, (error) => options.onIdleError?.(error))
  return {
    db,
    kind: 'postgres',
    stats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount, max }),
    listen: (channel, onMessage) => notifications.listen(channel, onMessage),
    listenReachable: (timeoutMs) =>
      listenReaches(
        listenUrl,
        async (channel, payload) => void (await sql`select pg_notify(${channel}, ${payload})`.execute(db)),
        timeoutMs,
      ),
    close: async () => {
      await notifications.close()
      await db.destroy()
    },
  }
}

/**
 * Embedded PostgreSQL (PGlite): in memory without a directory, persisted under it otherwise. A
 * directory is opened by one process only (src/db/embedded-holder.ts): the first takes its lock and
 * serves it on a loopback PostgreSQL socket; any other process gets a connection to that socket.
 */
export async function openPGlite(directory?: string, options: PostgresOptions = {}): Promise<DatabaseHandle> {
  if (!directory) return openOwnPGlite()
  await mkdir(path.dirname(directory), { recursive: true })
  if (!(await tryLock(directory))) {
    const { port, pid } = await holderAddress(directory)
    const handle = openPostgres(`postgres://postgres@127.0.0.1:${port}/postgres`, {
      ...options,
      poolSize: 2,
      // The socket serves one PGlite session to every process in turn: a statement one named would
      // still exist, under another text, for the next.
      preparedStatements: false,
    })
    try {
      await sql`select 1`.execute(handle.db)
    } catch (error) {
      await handle.close().catch(() => undefined)
      throw new EmbeddedDatabaseBusyError(
        `The embedded database in ${directory} is held by process ${pid}, which does not answer on 127.0.0.1:${port} (${(error as Error).message}). ` +
          `Stop that process and run the command again, or set platform.datasource.url to use PostgreSQL; ` +
          `if no such process runs, delete ${directory}.lock.`,
      )
    }
    // The socket does not carry notifications between processes (a revocation made here reaches
    // the holder when its cache entry expires): nothing to probe.
    return { ...handle, listenReachable: async () => true }
  }
  try {
    await mkdir(directory, { recursive: true })
    return await openOwnPGlite(directory)
  } catch (error) {
    await unlock(directory)
    throw error
  }
}

async function openOwnPGlite(directory?: string): Promise<DatabaseHandle> {
  // Imported here: a service on PostgreSQL never loads PGlite.
  const { PGlite } = await import('@electric-sql/pglite')
  const pglite = new PGlite({ dataDir: directory, parsers: { [INT8_OID]: (value: string) => value } })
  await pglite.waitReady
  const lock = new FifoLock()
  const db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite: taking(lock, pglite) }) })
  const served = directory ? await serveHeld(directory, pglite, lock) : undefined
  return {
    db,
    kind: 'pglite',
    stats: () => ({ total: 1, idle: 1, waiting: 0, max: 1 }),
    // PGlite is one session, so its own NOTIFYs reach it. (UN)LISTEN runs while holding the
    // lock: issued in the middle of another caller's transaction, it would only take effect if
    // that transaction committed.
    listen: async (channel, onMessage) => {
      const unlisten = await lock.run(() => pglite.listen(channel, onMessage))
      return async () => {
        if (!pglite.closed) await lock.run(() => unlisten())
      }
    },
    // One session: what it sends, it hears.
    listenReachable: async () => true,
    close: async () => {
      await served?.close()
      await db.destroy()
      if (directory) await unlock(directory)
    },
  }
}

/**
 * PGlite as Kysely's PGlite dialect uses it (one statement, or one transaction from BEGIN to
 * COMMIT), each taking `lock` first. The dialect queues its own callers on the single connection,
 * but the embedded holder also serves this PGlite to other processes (src/db/embedded-holder.ts)
 * under the same lock: without it, their statements run inside the dialect's open transaction
 * and are lost when it rolls back (test/pglite-dialect.test.ts).
 */
function taking(lock: FifoLock, pglite: PGlite): KyselyPGlite {
  return {
    get closed() {
      return pglite.closed
    },
    get ready() {
      return pglite.ready
    },
    waitReady: pglite.waitReady,
    close: () => pglite.close(),
    query: (query, params, options) => lock.run(() => pglite.query(query, params, options)),
    transaction: (callback) => lock.run(() => pglite.transaction(callback)),
  }
}

/** The configured database: PostgreSQL when a URL is set, PGlite otherwise (never under production). */
export async function openDatabase(config: Config, options: PostgresOptions = {}): Promise<DatabaseHandle> {
  const url = config.datasource.url
  if (url) {
    const { poolSize, preparedStatements, listenUrl } = config.datasource
    return openPostgres(url, { poolSize, preparedStatements, listenUrl, ...options })
  }
  if (config.profile === 'production') {
    throw new ConfigError('platform.datasource.url', 'is required under the production profile')
  }
  return openPGlite(`${config.dataDir}/pglite`, options)
}

/** Attempts of a unit of work that keeps failing with a serialization failure or a deadlock. */
export const TRANSACTION_ATTEMPTS = 3
/** The backoff before attempt n+1 is about BASE * 2^(n-1) ms, jittered by ±50%. */
const RETRY_BACKOFF_BASE_MS = 10

/**
 * SQLSTATE 40001 (serialization_failure) and 40P01 (deadlock_detected): the server aborted the
 * transaction because of a concurrent one, and the same work run again is expected to succeed; so
 * it is after a prepared statement went stale under a schema change (prepared again on the rerun).
 */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01'])

export function isRetryableTransactionError(error: unknown): boolean {
  const code = error instanceof Error ? (error as { code?: unknown }).code : undefined
  return (typeof code === 'string' && RETRYABLE_SQLSTATES.has(code)) || isStalePreparedStatement(error)
}

const backoff = (attempt: number) =>
  new Promise<void>((resolve) =>
    setTimeout(resolve, RETRY_BACKOFF_BASE_MS * 2 ** (attempt - 1) * (0.5 + Math.random())),
  )

/**
 * Work a caller adds to a service's unit of work: run in the same transaction, after the service's
 * own statements, with what they produced (the HTTP layer records an idempotent answer with the
 * effect it answers for).
 */
export type AlongWith<T> = (trx: Tx, result: T) => Promise<void>

/**
 * The one way to run a unit of work atomically. Repositories take the transaction as their first
 * argument; functions that must run inside one take `Tx`, so calling them outside does not type-check.
 *
 * A unit of work aborted by a serialization failure or a deadlock is rolled back and run again as a
 * whole, up to TRANSACTION_ATTEMPTS times with a small jittered backoff (so two conflicting units do
 * not meet again in step); after that it answers 503 SERVICE_UNAVAILABLE. `work` may therefore run
 * more than once: it must do nothing outside the database that a rollback would not undo (side
 * effects go through an outbox, in the same transaction).
 */
export async function inTransaction<T>(db: Kysely<Database>, work: (trx: Tx) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    let committing: Tx | undefined
    try {
      const result = await db.transaction().execute(async (trx) => {
        const done = await work(trx)
        committing = trx
        return done
      })
      if (committing) committed(committing, db)
      return result
    } catch (error) {
      if (committing) abandoned(committing)
      if (!isRetryableTransactionError(error)) throw error
      if (attempt >= TRANSACTION_ATTEMPTS) {
        throw new AppError(
          'SERVICE_UNAVAILABLE',
          'The operation kept conflicting with concurrent ones; retry',
          { headers: { 'retry-after': '1' }, cause: error },
        )
      }
      await backoff(attempt)
    }
  }
}

const UNAVAILABLE_NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'ETIMEDOUT',
  'EPIPE',
  'EAI_AGAIN',
])

/** True when an error means "the database cannot be reached", as opposed to a bad query. */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const code = (error as { code?: unknown }).code
  if (typeof code === 'string') {
    if (UNAVAILABLE_NETWORK_CODES.has(code)) return true
    // SQLSTATE class 08 connection exception, 57P0x shutdown / cannot connect now, 53300 too many connections.
    if (/^08...$/.test(code) || /^57P0[1-3]$/.test(code) || code === '53300') return true
  }
  // pg's own words for a connection that broke: the query in flight, or one sent on the broken
  // client afterwards (the ROLLBACK of a transaction whose connection died mid-way).
  return /timeout exceeded when trying to connect|Connection terminated|connection is closed|is not queryable|PGlite is closed/i.test(
    error.message,
  )
}

/**
 * True when the database refused a value as data: SQLSTATE class 22, data exception (a NUL
 * character in text, a timestamp or number out of range, text that is not a valid uuid). The value
 * came with the request, so this is the caller's mistake, never an outage, whatever wrapped it on
 * the way up: the `cause` chain is followed. Both drivers (pg and PGlite) give the SQLSTATE as
 * `code` and a `severity`, which error codes of Node (`ERR_…`, `ECONN…`) never have.
 */
export function isDataException(error: unknown): boolean {
  let current = error
  for (let depth = 0; depth < 8 && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string' && /^22[0-9A-Z]{3}$/.test(code) && 'severity' in current) return true
    current = current.cause
  }
  return false
}

/**
 * True when the database refused a row because it would repeat a value a unique index or
 * constraint keeps single: SQLSTATE 23505, unique_violation; of the index or constraint named
 * `constraint` only, when one is given. Both drivers (pg and PGlite) give the SQLSTATE as `code`
 * and the violated index's or constraint's name as `constraint`.
 */
export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  if (!(error instanceof Error)) return false
  const violation = error as { code?: unknown; constraint?: unknown }
  return violation.code === '23505' && (constraint === undefined || violation.constraint === constraint)
}

/**
 * Runs `work` and throws `conflict()` in place of a unique violation it ends in (of `constraint`
 * only, when one is given; any other error passes unchanged): a value the caller sent that is taken
 * already is the caller's conflict (409), not a server error.
 */
export async function mapUniqueViolation<T>(
  work: () => Promise<T>,
  conflict: () => AppError,
  constraint?: string,
): Promise<T> {
  try {
    return await work()
  } catch (error) {
    if (isUniqueViolation(error, constraint)) throw conflict()
    throw error
  }
}
