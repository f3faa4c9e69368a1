import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../src/app.ts'
import { configFromEnv, loadConfig } from '../../src/config.ts'
import { startEmbeddedStorage } from '../../src/storage/embedded-s3.ts'

/**
 * The service built in the bench's own process on the bench's database (migrating it), its workers
 * off, with a data directory `name` of its own: for seeding and for what the CLI would do.
 */
export async function inProcessApp(
  env: Record<string, string>,
  dataDir: string,
  name: string,
): Promise<{ app: FastifyInstance; close(): Promise<void> }> {
  const source = configFromEnv({ ...env, PLATFORM_DATA_DIR: path.join(dataDir, name) })
  let config = loadConfig(source)
  const embeddedS3 = await startEmbeddedStorage(config)
  if (embeddedS3) config = loadConfig({ ...source, ...embeddedS3.configSource() })
  const app = await buildApp(config, {
    logLevel: 'warn',
    startMailWorker: false,
    startAuthzWorker: false,
    startHousekeeping: false,
  })
  await app.ready()
  return {
    app,
    close: async () => {
      await app.close()
      await embeddedS3?.close()
    },
  }
}
