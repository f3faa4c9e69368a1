// Production entry point (`npm start`): all configuration comes from the environment.
import { buildApp } from './app.ts'
import { configFromEnv, loadConfig } from './config.ts'
import { exitOnStartupError, serve } from './lifecycle.ts'

try {
  const config = loadConfig(configFromEnv(process.env))
  const app = await buildApp(config, { logLevel: process.env.LOG_LEVEL ?? 'info' })
  await serve(app)
} catch (error) {
  exitOnStartupError(error)
}
