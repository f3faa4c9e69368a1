// Decorates `app.db` (Kysely), `app.database` (the handle: kind, pool stats) and `app.migrations`;
// needs config. Opens the configured database unless one is supplied, migrates on start, closes
// what it opened. A database that cannot be reached at start-up does not stop the service: it
// starts, /api routes answer 503 and readiness reports the database until it answers and is
// migrated, retried with back-off.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Kysely } from 'kysely'
import { type Config, ConfigError } from '../config.ts'
import { AppError } from '../errors.ts'
import { type DatabaseHandle, isDatabaseUnavailable, openDatabase, openPostgres } from './database.ts'
import { migrateToLatest } from './migrator.ts'
import { echoing, LISTEN_PROBE_MS, sharedListen } from './notifications.ts'
import type { Database } from './schema.ts'

declare module 'fastify' {
  interface FastifyInstance {
    db: Kysely<Database>
    database: DatabaseHandle
    migrations: Migrations
  }
}

export interface Migrations {
  /** True while a database that was down at start-up waits to be migrated. */
  readonly pending: boolean
  /** Resolves once the schema is migrated (at once unless it is pending). */
  readonly migrated: Promise<void>
}

const RETRY_MIN_MS = 250
const RETRY_MAX_MS = 5_000

export interface DbPluginOptions {
  /** A database owned by the caller (tests, CLI); the app then does not close it. */
  database?: DatabaseHandle
}

async function dbPlugin(app: FastifyInstance, options: DbPluginOptions) {
  const owned = options.database === undefined
  const database =
    options.database ??
    (await openDatabase(app.config, {
      onIdleError: (error) => app.log.warn({ err: error }, 'database connection failed'),
    }))
  // One LISTEN connection per channel for the whole app, however many features subscribe; what
  // the app notifies reaches its own subscribers at commit (`notify`).
  app.decorate('database', { ...database, listen: sharedListen(echoing(database.db, database.listen)) })
  app.decorate('db', database.db)
  if (owned) app.addHook('onClose', () => database.close())
  const migrations = { pending: false, migrated: Promise.resolve() }
  app.decorate('migrations', migrations)
  if (!app.config.datasource.migrateOnStart) return

  const migrate = async () => {
    // Before migrating: a migrator that went through a transaction pooler would leave its lock behind.
    if (owned) await checkListenConnection(database)
    const applied = await migrateDatabase(app.config, database, (unknown) =>
      app.log.warn(
        { unknown },
        'the database was migrated by a newer release: serving on its schema, nothing applied or rolled back',
      ),
    )
    if (applied.length > 0) app.log.info({ applied }, 'database migrated')
  }
  try {
    await migrate()
    return
  } catch (error) {
    if (!isDatabaseUnavailable(error)) throw error
    app.log.warn({ err: error }, 'database unavailable at start-up: /api answers 503 until it is back')
  }

  // Decided on the route the router matched: every /api route reaches the database (and documents 503).
  app.addHook('onRequest', (request, _reply, done) => {
    if (migrations.pending && request.routeOptions.url?.startsWith('/api/')) {
      done(
        new AppError('SERVICE_UNAVAILABLE', 'The database is not available yet', {
          headers: { 'retry-after': '1' },
        }),
      )
    } else done()
  })
  const { promise, resolve } = Promise.withResolvers<void>()
  migrations.pending = true
  migrations.migrated = promise
  let closing = false
  let timer: NodeJS.Timeout | undefined
  const attempt = async (delay: number) => {
    try {
      await migrate()
      migrations.pending = false
      app.log.info('database available: migrated, serving /api')
      resolve()
    } catch (error) {
      if (closing) return
      if (!isDatabaseUnavailable(error)) {
        app.log.error({ err: error }, 'migrating the database failed; retrying')
      }
      timer = setTimeout(() => void attempt(Math.min(delay * 2, RETRY_MAX_MS)), delay)
    }
  }
  timer = setTimeout(() => void attempt(RETRY_MIN_MS * 2), RETRY_MIN_MS)
  app.addHook('onClose', async () => {
    closing = true
    clearTimeout(timer)
  })
}

/**
 * Applies the pending migrations over a session of their own when platform.datasource.listen-url
 * names one: Kysely's migrator holds a session-level advisory lock from before its transaction to
 * after it, which a transaction pooler (PgBouncer) would leave behind on whichever server
 * connection took it, and the next instance to start would wait for it for an hour. Otherwise
 * through the pool, as before.
 */
export async function migrateDatabase(
  config: Config,
  database: DatabaseHandle,
  onAhead?: (unknown: string[]) => void,
): Promise<string[]> {
  const { url, listenUrl } = config.datasource
  if (database.kind !== 'postgres' || !url || !listenUrl || listenUrl === url) {
    return migrateToLatest(database.db, onAhead)
  }
  const direct = openPostgres(listenUrl, { poolSize: 1, preparedStatements: false })
  try {
    return await migrateToLatest(direct.db, onAhead)
  } finally {
    await direct.close()
  }
}

/**
 * Stops the start-up when notifications sent through the pool do not reach the LISTEN connection:
 * revocations and configuration changes would then never reach this instance before their caches
 * expire. A LISTEN URL that cannot be reached at all stops it too (the pool's URL answered).
 */
async function checkListenConnection(database: DatabaseHandle): Promise<void> {
  const property = 'platform.datasource.listen-url'
  let reached: boolean
  try {
    reached = await database.listenReachable()
  } catch (error) {
    if (isDatabaseUnavailable(error)) throw error
    throw new ConfigError(property, `cannot be used (${(error as Error).message})`)
  }
  if (!reached) {
    throw new ConfigError(
      property,
      `(default platform.datasource.url) must reach PostgreSQL itself: a notification sent through the pool did not arrive on a LISTEN connection there within ${LISTEN_PROBE_MS / 1000} s. ` +
        'It goes through a transaction pooler (PgBouncer with pool_mode = transaction) or to another database: ' +
        'point platform.datasource.listen-url straight at the PostgreSQL server and database behind platform.datasource.url.',
    )
  }
}

export default fp(dbPlugin, { name: 'db', fastify: '5.x', dependencies: ['config'] })
