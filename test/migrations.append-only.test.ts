import { execFileSync } from 'node:child_process'
import { promises as fs, readdirSync } from 'node:fs'
import path from 'node:path'
import { type Kysely, sql } from 'kysely'
import { FileMigrationProvider, Migrator } from 'kysely/migration'
import { afterEach, describe, expect, it } from 'vitest'
import { MIGRATIONS_FOLDER, migrateToLatest } from '../src/db/migrator.ts'
import type { Database } from '../src/db/schema.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// Migrations are append-only once committed: a database records the names it applied, and Kysely's
// migrator refuses to run (so the service refuses to start) when one of them is no longer among the
// files. A reverted migration therefore stays, and a later one undoes it. The committed names come
// from git's history, not from a list kept beside the files, which the same change could edit.

const MIGRATION_FILE = /\.(ts|js|mjs)$/

interface History {
  /** Each migration file ever added on the current branch, and the commit that first added it. */
  added: Map<string, string>
}

function git(args: string[]): string {
  return execFileSync('git', args, {
    cwd: MIGRATIONS_FOLDER,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  })
}

/**
 * The migrations folder's history, or undefined without git or a repository tracking the folder. A
 * shallow clone sees only its recent commits, so it checks what they added.
 */
function readHistory(): History | undefined {
  try {
    if (git(['ls-files', '--', '.']).trim() === '') return undefined
  } catch {
    return undefined
  }
  // --no-renames: a rename shows as the old name deleted and the new one added, so both names count.
  const log = git([
    'log',
    '--no-renames',
    '--diff-filter=A',
    '--name-only',
    '--format=commit %h',
    'HEAD',
    '--',
    '.',
  ])
  const added = new Map<string, string>()
  let commit = ''
  for (const line of log.split('\n')) {
    if (line.startsWith('commit ')) commit = line.slice('commit '.length)
    else if (MIGRATION_FILE.test(line) && !line.endsWith('.d.ts')) added.set(path.basename(line), commit)
  }
  return { added }
}

const history = readHistory()

describe('migrations', () => {
  it.skipIf(history === undefined)(
    'keeps every migration file ever committed, under its committed name',
    () => {
      const present = new Set(readdirSync(MIGRATIONS_FOLDER))
      const missing = [...(history as History).added]
        .filter(([name]) => !present.has(name))
        .map(([name, commit]) => `${name} (added in ${commit})`)
      expect(
        missing,
        'a committed migration was deleted or renamed: restore it as committed and undo it with a new migration',
      ).toEqual([])
      // Numbers never committed (0011, 0014) are gaps the migrator does not mind: it orders by name.
      expect((history as History).added.size).toBeGreaterThan(0)
    },
  )
})

describe('a database that applied the reverted 0019 (rate_limits unlogged)', () => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.dispose()
    database = undefined
  })

  const persistence = async (db: Kysely<Database>) => {
    const { rows } = await sql<{ relpersistence: string }>`
      select relpersistence from pg_class where relname = 'rate_limits' and relkind = 'r'`.execute(db)
    return rows[0]?.relpersistence
  }

  it('migrates to the latest, ending with rate_limits logged and its counters kept; 0020 undone, unlogged again', async () => {
    database = await createTestDatabase({ migrated: false, poolSize: 2 })
    const { db } = database.handle
    const migrator = new Migrator({
      db,
      provider: new FileMigrationProvider({ fs, path, migrationFolder: MIGRATIONS_FOLDER }),
    })
    const to0019 = await migrator.migrateTo('0019_rate_limits_unlogged')
    expect(to0019.error).toBeUndefined()
    expect(await persistence(db)).toBe('u')
    await db
      .insertInto('rate_limits')
      .values({ key: 'login:ip:198.51.100.7', window_start: new Date(), count: 3 })
      .execute()

    // What start-up runs (with platform.datasource.migrate-on-start): it refused this database
    // while 0019's file was missing.
    expect((await migrateToLatest(db))[0]).toBe('0020_rate_limits_logged')
    expect(await persistence(db)).toBe('p')
    expect(await db.selectFrom('rate_limits').select(['key', 'count']).execute()).toEqual([
      { key: 'login:ip:198.51.100.7', count: 3 },
    ])

    const back = await migrator.migrateTo('0019_rate_limits_unlogged')
    expect(back.error).toBeUndefined()
    expect(await persistence(db)).toBe('u')
  })
})
