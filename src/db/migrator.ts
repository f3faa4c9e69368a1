import { promises as fs } from 'node:fs'
import path from 'node:path'
import type { Kysely } from 'kysely'
import { FileMigrationProvider, Migrator } from 'kysely/migration'
import type { Database } from './schema.ts'

export const MIGRATIONS_FOLDER = path.resolve(import.meta.dirname, '../../migrations')

export class MigrationError extends Error {
  constructor(migrationName: string, cause: unknown) {
    super(`Migration ${migrationName} failed: ${(cause as Error)?.message ?? String(cause)}`, {
      cause,
    })
    this.name = 'MigrationError'
  }
}

/**
 * Applies every pending migration in `migrations/` in one locked run; returns the names applied. A
 * migration that fails is a MigrationError naming it; a failure before any migration ran (the
 * database cannot be reached, the lock cannot be taken) is thrown as it is.
 */
export async function migrateToLatest(db: Kysely<Database>): Promise<string[]> {
  const migrator = new Migrator({
    db,
    provider: new FileMigrationProvider({ fs, path, migrationFolder: MIGRATIONS_FOLDER }),
  })
  const { error, results = [] } = await migrator.migrateToLatest()
  if (!error) return results.filter((r) => r.status === 'Success').map((r) => r.migrationName)
  const failed = results.find((r) => r.status === 'Error')
  throw failed ? new MigrationError(failed.migrationName, error) : error
}
