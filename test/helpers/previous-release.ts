import { execFile } from 'node:child_process'
import { mkdtemp, rm, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { ROOT } from './process.ts'

// The previous release of this checkout, for rolling-upgrade tests: a commit of its history whose
// sources, exported with `git archive` into a temporary folder (this checkout's node_modules linked
// in), run beside this release on one database.

const run = promisify(execFile)

/** The migration names a commit holds, in the order the migrator applies them. */
async function migrationsAt(commit: string): Promise<string[]> {
  const listed = await run('git', ['ls-tree', '--name-only', commit, 'migrations/'], { cwd: ROOT })
  return listed.stdout.split('\n').filter(Boolean).sort()
}

/**
 * The previous release: the newest commit of this branch's own line (first parents) whose
 * migrations are a proper prefix of this checkout's, so a database it migrated is one this release
 * can move on from. (A commit between two merges may hold a later-numbered migration without an
 * earlier one a later merge brought; no release ships in that state, and the migrator refuses it.)
 * Null without the history (a shallow clone).
 */
export async function previousRelease(): Promise<string | null> {
  const history = await run('git', ['rev-list', '--first-parent', '--max-count=400', 'HEAD'], {
    cwd: ROOT,
  }).catch(() => null)
  const commits = history?.stdout.split('\n').filter(Boolean) ?? []
  const head = commits[0]
  if (!head) return null
  const current = await migrationsAt(head)
  for (const commit of commits.slice(1)) {
    const older = await migrationsAt(commit)
    if (older.length < current.length && older.every((name, i) => name === current[i])) return commit
  }
  return null
}

export interface ExportedRelease {
  commit: string
  /** The folder holding its sources, to run `src/server.ts` and `src/cli.ts` from. */
  root: string
  /** The environment variables of the configuration properties it knows (it refuses others). */
  variables: ReadonlySet<string>
  /** `env` without the configuration variables it does not know. */
  envFor(env: Record<string, string>): Record<string, string>
  /** Removes the folder. */
  remove(): Promise<void>
}

/** Exports `commit`'s sources into a temporary folder with this checkout's node_modules linked in. */
export async function exportRelease(commit: string): Promise<ExportedRelease> {
  const folder = await mkdtemp(path.join(tmpdir(), 'platform-release-'))
  const root = path.join(folder, 'release')
  await run('sh', ['-c', `mkdir -p "${root}" && git archive "${commit}" | tar -x -C "${root}"`], {
    cwd: ROOT,
  })
  await symlink(path.join(ROOT, 'node_modules'), path.join(root, 'node_modules'), 'dir')
  const listed = await run(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      "const { configProperties, envName } = await import('./src/config.ts'); console.log(JSON.stringify(configProperties.map(envName)))",
    ],
    { cwd: root },
  )
  const variables = new Set(JSON.parse(listed.stdout) as string[])
  return {
    commit,
    root,
    variables,
    envFor: (env) =>
      Object.fromEntries(
        Object.entries(env).filter(([name]) => !name.startsWith('PLATFORM_') || variables.has(name)),
      ),
    remove: () => rm(folder, { recursive: true, force: true }),
  }
}
