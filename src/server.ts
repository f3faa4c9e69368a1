// Production entry point (`npm start`): all configuration comes from the environment.
import { buildApp } from './app.ts'
import { configFromEnv, loadConfig } from './config.ts'
import { exitOnStartupError, serve } from './lifecycle.ts'
import { startEmbeddedStorage } from './storage/embedded-s3.ts'

let port: number | undefined
try {
  const source = configFromEnv(process.env)
  let config = loadConfig(source)
  port = config.server.port
  // Outside production, no platform.storage.s3.endpoint: the embedded S3 server.
  const embeddedS3 = await startEmbeddedStorage(config)
  if (embeddedS3) config = loadConfig({ ...source, ...embeddedS3.configSource() })
  const app = await buildApp(config, { logLevel: process.env.LOG_LEVEL ?? 'info' })
  app.addHook('onClose', async () => embeddedS3?.close())
  await serve(app)
} catch (error) {
  exitOnStartupError(error, port)
}
