import type { PGlite } from '@electric-sql/pglite'
import {
  CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type QueryResult,
  type TransactionSettings,
} from 'kysely'
import { FifoLock } from './fifo-lock.ts'

// A Kysely dialect over PGlite. PGlite is one connection, so the driver hands it out to one
// holder at a time (a FIFO queue): a transaction then owns it until commit or rollback, exactly
// as a pooled connection would be owned, and concurrent transactions queue instead of interleaving.

const WRITE_QUERIES = new Set(['InsertQueryNode', 'UpdateQueryNode', 'DeleteQueryNode', 'MergeQueryNode'])

class PGliteConnection implements DatabaseConnection {
  readonly #pg: PGlite
  constructor(pg: PGlite) {
    this.#pg = pg
  }

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    const result = await this.#pg.query<R>(compiledQuery.sql, [...compiledQuery.parameters], {
      rowMode: 'object',
    })
    const writes = WRITE_QUERIES.has(compiledQuery.query?.kind ?? '')
    return { rows: result.rows, numAffectedRows: writes ? BigInt(result.affectedRows ?? 0) : undefined }
  }

  // biome-ignore lint/correctness/useYield: streaming is not offered by PGlite's query API
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('PGlite dialect does not support streaming queries')
  }
}

class PGliteDriver implements Driver {
  readonly #pg: PGlite
  readonly #connection: PGliteConnection
  readonly #lock: FifoLock
  #release: (() => void) | undefined

  constructor(pg: PGlite, lock: FifoLock) {
    this.#pg = pg
    this.#lock = lock
    this.#connection = new PGliteConnection(pg)
  }

  async init(): Promise<void> {
    await this.#pg.waitReady
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    this.#release = await this.#lock.acquire()
    return this.#connection
  }

  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const isolation = settings.isolationLevel ? ` isolation level ${settings.isolationLevel}` : ''
    const access = settings.accessMode ? ` ${settings.accessMode}` : ''
    await connection.executeQuery(CompiledQuery.raw(`begin${isolation}${access}`))
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('commit'))
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('rollback'))
  }

  async savepoint(connection: DatabaseConnection, name: string): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(`savepoint ${quoteIdent(name)}`))
  }

  async rollbackToSavepoint(connection: DatabaseConnection, name: string): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(`rollback to savepoint ${quoteIdent(name)}`))
  }

  async releaseSavepoint(connection: DatabaseConnection, name: string): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(`release savepoint ${quoteIdent(name)}`))
  }

  async releaseConnection(): Promise<void> {
    const release = this.#release
    this.#release = undefined
    release?.()
  }

  async destroy(): Promise<void> {
    await this.#lock.drained()
    if (!this.#pg.closed) await this.#pg.close()
  }
}

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`

export class PGliteDialect implements Dialect {
  readonly #pg: PGlite
  readonly #lock: FifoLock
  /** `lock` is the database's one connection; share it with anything else that runs statements on `pg`. */
  constructor(pg: PGlite, lock: FifoLock = new FifoLock()) {
    this.#pg = pg
    this.#lock = lock
  }
  createAdapter() {
    return new PostgresAdapter()
  }
  createDriver(): Driver {
    return new PGliteDriver(this.#pg, this.#lock)
  }
  // biome-ignore lint/suspicious/noExplicitAny: Kysely's dialect interface is typed over any database
  createIntrospector(db: Kysely<any>) {
    return new PostgresIntrospector(db)
  }
  createQueryCompiler() {
    return new PostgresQueryCompiler()
  }
}
