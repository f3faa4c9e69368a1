// The dev launcher (`npm run dev`): the service on embedded defaults, nothing to install.

import pinoPretty from 'pino-pretty'
import { buildApp } from './app.ts'
import { configFromEnv, loadConfig } from './config.ts'
import { holderAddress } from './db/embedded-holder.ts'
import { developmentSecret, developmentSigningKey } from './dev-secret.ts'
import { ensureDemoAdmin } from './dev-seed.ts'
import { exitOnStartupError, freePort, serve } from './lifecycle.ts'
import { startEmbeddedStorage } from './storage/embedded-s3.ts'

let port: number | undefined
try {
  const source = configFromEnv(process.env)
  source['platform.profile'] ??= 'development'
  // Plain-HTTP localhost: browsers drop Secure cookies outside https in some engines.
  source['platform.auth.cookie.secure'] ??= 'false'
  // Webhooks to a receiver on this machine (http://localhost:…), which production refuses.
  source['platform.webhooks.allow-private-networks'] ??= 'true'
  // Self-service sign-up and email sign-in to try out; both are off unless enabled elsewhere.
  source['platform.auth.sign-up.enabled'] ??= 'true'
  source['platform.auth.email-sign-in.enabled'] ??= 'true'
  // Reachable from this machine only, unless told otherwise.
  source['platform.server.host'] ??= '127.0.0.1'
  port = Number(source['platform.server.port'] ?? 8080)
  if (port === 0) port = await freePort(source['platform.server.host'])
  source['platform.server.port'] = String(port)
  // Links in emails, the docs' "Try it out" and the embedded store's CORS follow the bound port.
  source['platform.web.public-url'] ??= `http://localhost:${port}`
  const dataDir = source['platform.data-dir'] ?? '.data'
  if (!source['platform.auth.jwt.secret'])
    source['platform.auth.jwt.secret'] = await developmentSecret(dataDir)
  // Discovery needs a URL as the issuer; here it is where the service answers.
  source['platform.auth.jwt.issuer'] ??= source['platform.web.public-url']
  const algorithm = source['platform.auth.jwt.algorithm']
  if ((algorithm === 'ES256' || algorithm === 'EdDSA') && !source['platform.auth.jwt.signing-key'])
    source['platform.auth.jwt.signing-key'] = await developmentSigningKey(dataDir, algorithm)
  let config = loadConfig(source)
  // No platform.storage.s3.endpoint: the embedded S3 server, its bucket created here (never by the service).
  const embeddedS3 = await startEmbeddedStorage(config)
  if (embeddedS3) config = loadConfig({ ...source, ...embeddedS3.configSource() })
  // Human-readable logs here; `npm start` (production) logs JSON lines. LOG_FORMAT=json keeps JSON.
  const logStream =
    process.env.LOG_FORMAT === 'json'
      ? undefined
      : pinoPretty({ colorize: process.stdout.isTTY, translateTime: 'HH:MM:ss', ignore: 'pid,hostname' })
  const app = await buildApp(config, { logLevel: process.env.LOG_LEVEL ?? 'info', logStream, console: true })
  app.addHook('onClose', async () => embeddedS3?.close())
  await app.ready()
  const demo = await ensureDemoAdmin(app, dataDir)
  const address = new URL(await serve(app))
  const base = `http://localhost:${address.port}`
  const database = config.datasource.url
    ? 'PostgreSQL (platform.datasource.url)'
    : `embedded PGlite in ${dataDir}/pglite, served to the CLI and psql at postgres://postgres@127.0.0.1:${(await holderAddress(`${dataDir}/pglite`, 0)).port}/postgres`
  process.stdout.write(
    [
      '',
      `  Platform core is running at ${base}`,
      `  Demo console:      ${base}/ (sign in as the demo admin below)`,
      `  Interactive docs:  ${base}/docs`,
      `  OpenAPI document:  ${base}/v3/api-docs`,
      `  Database:          ${database}`,
      `  Object storage:    ${embeddedS3 ? `embedded S3 at ${embeddedS3.endpoint}, files in ${dataDir}/s3` : config.storage.s3.endpoint} (bucket ${config.storage.s3.bucket})`,
      `  Mail:              ${config.mail.smtp.url ? 'SMTP (platform.mail.smtp.url)' : `embedded sink, .eml files in ${dataDir}/mail`}`,
      `  Demo admin:        ${demo.email} / ${demo.password ?? '(see demo-admin.json in the data directory)'}`,
      `  Demo organization: ${demo.organizationId} (npm run cli -- api-key create --org ${demo.organizationId} …)`,
      `  Sign in:           curl -i -H 'content-type: application/json' -d '${JSON.stringify({ username: demo.email, password: demo.password ?? 'PASSWORD' })}' ${base}/api/auth/login`,
      '',
      '',
    ].join('\n'),
  )
} catch (error) {
  exitOnStartupError(error, port)
}
