// Decorates `app.db` (Kysely) and `app.database` (the handle: kind, pool stats); needs config.
// Opens the configured database unless one is supplied, migrates on start, closes what it opened.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Kysely } from 'kysely'
import { type DatabaseHandle, openDatabase } from '../src/db/database.ts'
import { migrateToLatest } from '../src/db/migrator.ts'
import { sharedListen } from '../src/db/notifications.ts'
import type { Database } from '../src/db/schema.ts'

declare module 'fastify' {
  interface FastifyInstance {
    db: Kysely<Database>
    database: DatabaseHandle
  }
}

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
  // One LISTEN connection per channel for the whole app, however many features subscribe.
  app.decorate('database', { ...database, listen: sharedListen(database.listen) })
  app.decorate('db', database.db)
  if (owned) app.addHook('onClose', () => database.close())
  if (app.config.datasource.migrateOnStart) {
    const applied = await migrateToLatest(database.db)
    if (applied.length > 0) app.log.info({ applied }, 'database migrated')
  }
}

export default fp(dbPlugin, { name: 'db', fastify: '5.x', dependencies: ['config'] })
