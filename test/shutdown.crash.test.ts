import { access, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { testSecret } from './helpers/app.ts'
import { startService } from './helpers/service-process.ts'

const exists = (file: string) =>
  access(file).then(
    () => true,
    () => false,
  )

// The embedded database is the witness on either database the suite runs on: the lock file beside
// its directory is removed by the app's onClose hooks and by nothing else, so an exit that skips
// them leaves it behind.
// A process on the embedded database starts by running every migration: beside parallel test files
// on two cores that takes longer than the suite's default test time.
vi.setConfig({ testTimeout: 90_000 })

describe('a crash of the service process', () => {
  it.each([
    ['an uncaught exception', 'throw', 'boom: uncaught exception'],
    ['an unhandled rejection', 'reject', 'boom: unhandled rejection'],
  ])(
    'closes the app before exiting with 1 on %s',
    async (_case, crash, message) => {
      const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-crash-'))
      const lockFile = path.join(dataDir, 'pglite.lock')
      const service = await startService({
        env: { PLATFORM_DATA_DIR: dataDir, PLATFORM_AUTH_JWT_SECRET: testSecret() },
        preload: [path.resolve(import.meta.dirname, 'helpers/crash-on-message.ts')],
        ipc: true,
      })
      try {
        expect(await exists(lockFile)).toBe(true)
        const closed = new Promise<number | null>((resolve) => service.child.once('close', resolve))
        service.child.send(crash)
        expect(await closed, service.output()).toBe(1)
        expect(await exists(lockFile), `the lock file is left behind:\n${service.output()}`).toBe(false)
        expect(service.output()).toContain(message)
      } finally {
        await service.kill()
        await rm(dataDir, { recursive: true, force: true })
      }
    },
    60_000,
  )
})
