import { promises as fs } from 'node:fs'
import path from 'node:path'
import { type Kysely, sql } from 'kysely'
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
 *
 * A database already migrated by a newer release (it records migrations this code does not have:
 * a rolling upgrade, where old instances keep serving, or start again, while a new one has
 * migrated) is left as it is: nothing is applied and nothing rolled back, `onAhead` is told the
 * migrations it does not know, and the answer is empty. Old code keeps working on the newer
 * schema because migrations only expand while a release older than them may still run
 * (docs/operations.md, rolling upgrades).
 */
export async function migrateToLatest(
  db: Kysely<Database>,
  onAhead?: (unknown: string[]) => void,
): Promise<string[]> {
  const provider = new FileMigrationProvider({ fs, path, migrationFolder: MIGRATIONS_FOLDER })
  const migrator = new Migrator({ db, provider })
  const { error, results = [] } = await migrator.migrateToLatest()
  if (!error) return results.filter((r) => r.status === 'Success').map((r) => r.migrationName)
  const failed = results.find((r) => r.status === 'Error')
  if (failed) throw new MigrationError(failed.migrationName, error)
  if (error instanceof Error && /previously executed migration \S+ is missing/.test(error.message)) {
    const known = new Set(Object.keys(await provider.getMigrations()))
    const recorded = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db)
    const unknown = recorded.rows.map((row) => row.name).filter((name) => !known.has(name))
    const last = [...known].sort().at(-1) ?? ''
    // Newer only: every migration it does not know sorts after the last one it has.
    if (unknown.length > 0 && unknown.every((name) => name > last)) {
      onAhead?.(unknown)
      return []
    }
  }
  throw error
}
