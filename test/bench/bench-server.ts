// The service as `npm start` runs it, plus what only the benchmark needs: every SQL statement sent
// to PostgreSQL is counted, and GET /__bench/statements answers the count, so the benchmark prints
// statements per request. Not part of the product.
import pg from 'pg'
import { buildApp } from '../../src/app.ts'
import { configFromEnv, loadConfig } from '../../src/config.ts'
import { exitOnStartupError, serve } from '../../src/lifecycle.ts'
import { startEmbeddedStorage } from '../../src/storage/embedded-s3.ts'

let statements = 0
const query = pg.Client.prototype.query
pg.Client.prototype.query = function counted(this: pg.Client, ...args: unknown[]) {
  statements++
  return (query as (...a: unknown[]) => unknown).apply(this, args)
} as typeof query

try {
  const source = configFromEnv(process.env)
  let config = loadConfig(source)
  const embeddedS3 = await startEmbeddedStorage(config)
  if (embeddedS3) config = loadConfig({ ...source, ...embeddedS3.configSource() })
  const app = await buildApp(config, { logLevel: process.env.LOG_LEVEL ?? 'info' })
  app.get('/__bench/statements', { config: { public: true } }, async () => ({ statements }))
  app.addHook('onClose', async () => embeddedS3?.close())
  await serve(app)
} catch (error) {
  exitOnStartupError(error)
}
