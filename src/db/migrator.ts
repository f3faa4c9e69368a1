import { promises as fs } from 'node:fs'
import path from 'node:path'
import type { Kysely } from 'kysely'
import { FileMigrationProvider, Migrator } from 'kysely/migration'
import type { Database } from './schema.ts'

export const MIGRATIONS_FOLDER = path.resolve(import.meta.dirname, '../../migrations')

export class MigrationError extends Error {
  constructor(migrationName: string | undefined, cause: unknown) {
    super(`Migration ${migrationName ?? '(unknown)'} failed: ${(cause as Error)?.message ?? String(cause)}`, {
      cause,
    })
    this.name = 'MigrationError'
  }
}

/** Applies every pending migration in `migrations/` in one locked run; returns the names applied. */
export async function migrateToLatest(db: Kysely<Database>): Promise<string[]> {
  const migrator = new Migrator({
    db,
    provider: new FileMigrationProvider({ fs, path, migrationFolder: MIGRATIONS_FOLDER }),
  })
  const { error, results = [] } = await migrator.migrateToLatest()
  if (error) throw new MigrationError(results.find((r) => r.status === 'Error')?.migrationName, error)
  return results.filter((r) => r.status === 'Success').map((r) => r.migrationName)
}
