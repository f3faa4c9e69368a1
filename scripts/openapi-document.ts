import { randomBytes } from 'node:crypto'
import { buildApp } from '../src/app.ts'
import { loadConfig } from '../src/config.ts'
import { openPGlite } from '../src/db/database.ts'
import { migrateToLatest } from '../src/db/migrator.ts'

// The OpenAPI document, read from the app built in-process: the routes' schemas are the source, so
// no server has to run (npm run client:generate, the document lint). Nothing is listened on or sent:
// the database is an empty in-memory PGlite and the object store an address never called.

export async function buildDocument(): Promise<Record<string, unknown>> {
  const config = loadConfig({
    'platform.auth.jwt.secret': randomBytes(32).toString('base64'),
    'platform.storage.s3.endpoint': 'http://127.0.0.1:9',
    'platform.docs.enabled': 'true',
  })
  const database = await openPGlite()
  try {
    await migrateToLatest(database.db)
    const app = await buildApp(config, {
      database,
      logLevel: 'silent',
      startMailWorker: false,
      startAuthzWorker: false,
      startHousekeeping: false,
    })
    try {
      await app.ready()
      return structuredClone(app.swagger()) as Record<string, unknown>
    } finally {
      await app.close()
    }
  } finally {
    await database.close()
  }
}

if (import.meta.main) {
  process.stdout.write(`${JSON.stringify(await buildDocument(), null, 2)}\n`)
}
