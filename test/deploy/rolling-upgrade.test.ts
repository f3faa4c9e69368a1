import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { FAST_LOGIN_CONFIG, PASSWORD } from '../helpers/accounts.ts'
import { testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import { type ExportedRelease, exportRelease, previousRelease } from '../helpers/previous-release.ts'
import { ROOT, runNode } from '../helpers/process.ts'
import { envOf, type ServiceProcess, startService } from '../helpers/service-process.ts'

// A rolling upgrade on one database: the previous release (test/helpers/previous-release.ts: the
// newest earlier commit whose migrations this release's extend, its sources exported with `git
// archive` into a temporary folder, this checkout's node_modules linked in) serves on a database it migrated, with a signed-in user creating and
// reading purchase requests all along, while this release starts beside it and applies the newer
// migration: the old release keeps answering every request. Then this release starts on a schema a
// still newer release migrated: its migrator applies nothing, rolls nothing back, and it serves.

const TIMEOUT_MS = 180_000

describe.skipIf(!usingPostgres())(
  'a rolling upgrade: the previous release beside this one on one database',
  { timeout: TIMEOUT_MS },
  () => {
    let database: TestDatabase
    let folder: string
    let release: ExportedRelease | undefined
    let oldRoot: string
    let env: Record<string, string>
    let old: ServiceProcess | undefined
    let current: ServiceProcess | undefined
    let commit: string | null

    beforeAll(async () => {
      commit = await previousRelease()
      expect(commit, 'the previous release needs the git history (not a shallow clone)').toBeTruthy()
      folder = await mkdtemp(path.join(tmpdir(), 'platform-upgrade-'))
      release = await exportRelease(commit as string)
      oldRoot = release.root
      database = await createTestDatabase({ migrated: false, poolSize: 1 })
      const config: ConfigSource = {
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.datasource.url': database.url,
        'platform.datasource.pool-size': '4',
      }
      env = { ...envOf(config), LOG_LEVEL: 'warn' }
    }, TIMEOUT_MS)

    afterAll(async () => {
      await Promise.all([old?.stop(), current?.stop()])
      await database?.dispose()
      if (folder) await rm(folder, { recursive: true, force: true })
      await release?.remove()
    })

    const migrations = async () =>
      (
        await sql<{ name: string }>`select name from kysely_migration order by name`.execute(
          database.handle.db,
        )
      ).rows.map((row) => row.name)

    it('keeps the old release serving while the new one migrates, and this release starts on a newer schema without touching it', async () => {
      const start = (root: string, name: string) =>
        startService({
          env: { ...env, PLATFORM_DATA_DIR: path.join(folder, name) },
          root,
          readyWithinMs: 90_000,
        })
      old = await start(oldRoot, 'old')
      const before = await migrations()
      // An organization and a member, made by the old release's CLI.
      const cli = async (args: string[], stdin?: string) => {
        const { code, stdout, stderr } = await runNode(
          path.join(oldRoot, 'src/cli.ts'),
          args,
          {
            ...env,
            PLATFORM_DATA_DIR: path.join(folder, `cli-${args[0]}`),
          },
          stdin,
        ).done
        expect(code, stderr).toBe(0)
        return JSON.parse(stdout) as Record<string, string>
      }
      const { organizationId } = await cli(['org', 'create', '--name', 'Upgraded'])
      await cli(
        [
          'user',
          'create',
          '--org',
          organizationId as string,
          '--email',
          'upgrade@example.com',
          '--role',
          'member',
          '--password-stdin',
        ],
        `${PASSWORD}\n`,
      )
      const login = await fetch(`${old.base}/api/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ username: 'upgrade@example.com', password: PASSWORD }),
      })
      expect(login.status).toBe(200)
      const cookie = login.headers
        .getSetCookie()
        .map((line) => line.split(';')[0])
        .join('; ')

      // The old release under a steady stream of writes and reads for as long as the upgrade takes.
      const answers = new Map<string, number>()
      let running = true
      const traffic = (async () => {
        for (let i = 0; running; i++) {
          const service = old as ServiceProcess
          const res = await fetch(`${service.base}/api/purchase-requests${i % 2 ? '?limit=5' : ''}`, {
            method: i % 2 ? 'GET' : 'POST',
            headers: { cookie, ...(i % 2 ? {} : { 'content-type': 'application/json' }) },
            ...(i % 2 ? {} : { body: JSON.stringify({ title: `During the upgrade ${i}` }) }),
          }).then(
            async (r) => `${r.status}${r.status >= 300 ? ` ${await r.text()}` : ''}`,
            (error: Error) => `error ${error.message}`,
          )
          answers.set(res, (answers.get(res) ?? 0) + 1)
        }
      })()

      current = await start(ROOT, 'current')
      running = false
      await traffic
      const after = await migrations()
      expect(after.length).toBeGreaterThan(before.length)
      expect(after.slice(0, before.length)).toEqual(before)
      console.log(
        `rolling upgrade from ${commit}: the old release answered ${JSON.stringify(Object.fromEntries(answers))}`,
      )
      expect([...answers.keys()].sort()).toEqual(['200', '201'])
      // Both serve the session on the newer schema.
      for (const service of [old, current]) {
        const list = await fetch(`${service.base}/api/purchase-requests?limit=5`, { headers: { cookie } })
        expect(list.status).toBe(200)
      }

      // This release started on a schema a newer release migrated (one migration it does not know):
      // it serves on it, applies nothing and rolls nothing back. (Releases before this one stop with
      // Kysely's "previously executed migration … is missing".)
      await sql`insert into kysely_migration (name, timestamp) values ('9999_from_a_newer_release', ${new Date().toISOString()})`.execute(
        database.handle.db,
      )
      await current.stop()
      current = await startService({
        env: { ...env, LOG_LEVEL: 'info', PLATFORM_DATA_DIR: path.join(folder, 'current') },
        readyWithinMs: 90_000,
      })
      expect(current.output()).toContain('the database was migrated by a newer release')
      expect(await migrations()).toEqual([...after, '9999_from_a_newer_release'])
      const created = await fetch(`${current.base}/api/purchase-requests`, {
        method: 'POST',
        headers: { cookie, 'content-type': 'application/json' },
        body: JSON.stringify({ title: 'After a newer release' }),
      })
      expect(created.status).toBe(201)
    })
  },
)
