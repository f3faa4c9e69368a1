// The service as `npm start` runs it, on a clock that runs SOAK_CLOCK_RATE times faster than real
// time (default 60: an hour a minute), so every retention window passes during `npm run soak`.
import { buildApp } from '../../src/app.ts'
import type { Clock } from '../../src/clock.ts'
import { configFromEnv, loadConfig } from '../../src/config.ts'
import { exitOnStartupError, serve } from '../../src/lifecycle.ts'
import { startEmbeddedStorage } from '../../src/storage/embedded-s3.ts'

const rate = Number(process.env.SOAK_CLOCK_RATE ?? 60)
const origin = Date.now()
const clock: Clock = { now: () => new Date(origin + (Date.now() - origin) * rate) }

try {
  const source = configFromEnv(process.env)
  let config = loadConfig(source)
  const embeddedS3 = await startEmbeddedStorage(config)
  if (embeddedS3) config = loadConfig({ ...source, ...embeddedS3.configSource() })
  const app = await buildApp(config, { logLevel: process.env.LOG_LEVEL ?? 'warn', clock })
  app.addHook('onClose', async () => embeddedS3?.close())
  await serve(app)
} catch (error) {
  exitOnStartupError(error)
}
