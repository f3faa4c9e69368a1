import { randomBytes } from 'node:crypto'
import { inject } from 'vitest'
import { type DatabaseHandle, openPGlite, openPostgres } from '../../src/db/database.ts'
import { migrateToLatest } from '../../src/db/migrator.ts'
import { adminQuery, databaseUrl } from './postgres-admin.ts'

export interface TestDatabase {
  handle: DatabaseHandle
  /** The connection URL on real PostgreSQL; undefined on PGlite. */
  url: string | undefined
  /** Closes the handle and drops the database. */
  dispose(): Promise<void>
}

export const usingPostgres = (): boolean => Boolean(process.env.TEST_DATABASE_URL)

/**
 * A database of this test file's own: a clone of the migrated template on PostgreSQL (when
 * TEST_DATABASE_URL is set), a fresh in-memory PGlite otherwise. `migrated: false` gives an empty one.
 */
export async function createTestDatabase(
  options: { migrated?: boolean; poolSize?: number } = {},
): Promise<TestDatabase> {
  const migrated = options.migrated ?? true
  const serverUrl = process.env.TEST_DATABASE_URL
  if (!serverUrl) {
    const handle = await openPGlite()
    if (migrated) await migrateToLatest(handle.db)
    return { handle, url: undefined, dispose: () => handle.close() }
  }
  const name = `platform_test_${randomBytes(6).toString('hex')}`
  const template = inject('templateDatabase')
  await adminQuery(
    serverUrl,
    migrated && template ? `create database ${name} template ${template}` : `create database ${name}`,
  )
  const url = databaseUrl(serverUrl, name)
  const handle = openPostgres(url, { poolSize: options.poolSize ?? 25 })
  if (migrated && !template) await migrateToLatest(handle.db)
  return {
    handle,
    url,
    dispose: async () => {
      await handle.close()
      await adminQuery(serverUrl, `drop database if exists ${name} with (force)`)
    },
  }
}
