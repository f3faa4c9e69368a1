import { randomUUID } from 'node:crypto'
import type { Writable } from 'node:stream'
import cookie from '@fastify/cookie'
import cors from '@fastify/cors'
import Fastify, { type FastifyInstance, LogController } from 'fastify'
import authzPlugin from './authz/plugin.ts'
import type { AuthorizationPort } from './authz/port.ts'
import { type Clock, systemClock } from './clock.ts'
import type { Config } from './config.ts'
import type { DatabaseHandle } from './db/database.ts'
import dbPlugin from './db/plugin.ts'
import type { EventBus } from './events.ts'
import type { PasswordResetHandler } from './features/accounts/index.ts'
import accountsFeature from './features/accounts/index.ts'
import auditEventsFeature from './features/audit-events/index.ts'
import federationFeature from './features/federation/index.ts'
import filesFeature from './features/files/index.ts'
import impersonationFeature from './features/impersonation/index.ts'
import machinePrincipalsFeature from './features/machine-principals/index.ts'
import oauth2Feature from './features/oauth2/index.ts'
import organizationsFeature from './features/organizations/index.ts'
import outboxStatusFeature from './features/outbox-status/index.ts'
import outboxWorkersPlugin from './features/outbox-workers.ts'
import passkeysFeature from './features/passkeys/index.ts'
import permissionChecksFeature from './features/permission-checks/index.ts'
import servicesPlugin from './features/plugin.ts'
import purchaseRequestsFeature from './features/purchase-requests/index.ts'
import { retentionRules } from './features/retention.ts'
import type { CredentialAuthenticator, SessionVersionProvider } from './features/sessions/index.ts'
import sessionsFeature from './features/sessions/index.ts'
import ssoFeature from './features/sso/index.ts'
import webhooksFeature, { type Resolve } from './features/webhooks/index.ts'
import housekeepingPlugin from './housekeeping/plugin.ts'
import { validatorFor } from './http/ajv.ts'
import authPlugin from './http/auth.ts'
import backgroundPlugin from './http/background.ts'
import configPlugin from './http/config.ts'
import docsPlugin from './http/docs.ts'
import errorsPlugin, { clientError, frameworkError } from './http/errors.ts'
import healthPlugin from './http/health.ts'
import idempotencyPlugin from './http/idempotency.ts'
import metricsPlugin from './http/metrics.ts'
import rateLimitsPlugin from './http/rate-limits.ts'
import { securityHeaders } from './http/security-headers.ts'
import tenantPlugin from './http/tenant.ts'
import { standardOutput } from './log-destination.ts'
import { loggerOptions } from './logger.ts'
import mailPlugin from './mail/plugin.ts'
import type { MailTransport } from './mail/transports.ts'
import storagePlugin from './storage/plugin.ts'
import type { ObjectStore } from './storage/port.ts'

export interface AppDependencies {
  clock?: Clock
  /** A database the caller owns and closes; otherwise the app opens the configured one. */
  database?: DatabaseHandle
  /** Log level (default `info`); `silent` turns logging off. */
  logLevel?: string
  /** Where log lines go (default stdout); tests capture them here. */
  logStream?: Writable
  /** Extension point: replaces the built-in account-table authenticator. */
  authenticator?: CredentialAuthenticator
  /** Extension point: enforces the `ver` claim of user access tokens. */
  sessionVersionProvider?: SessionVersionProvider
  /** In-process events; subscribe with `events.on(...)` before or after building. */
  events?: EventBus
  /** Extension point: replaces the built-in password reset on the account table. */
  passwordResetHandler?: PasswordResetHandler
  /** A mail transport the caller owns (tests); otherwise SMTP or the embedded sink from config. */
  mailTransport?: MailTransport
  /** false: the mail outbox worker does not poll (CLI; tests drive `app.mail.worker.runOnce()`). */
  startMailWorker?: boolean
  /** false: the webhook outbox worker does not poll (CLI; tests drive `app.services.webhookWorker.runOnce()`). */
  startWebhookWorker?: boolean
  /** Resolves webhook endpoints' host names (tests map names to addresses); default: the system's resolver. */
  webhookResolve?: Resolve
  /** An authorization adapter the caller owns (tests); otherwise OpenFGA or the embedded evaluator. */
  authorization?: AuthorizationPort
  /** false: the authorization outbox worker does not poll (CLI; tests drive `app.authz.outbox.runOnce()`). */
  startAuthzWorker?: boolean
  /** false: retention rules do not run periodically (CLI; tests drive `app.housekeeping.runOnce()`). */
  startHousekeeping?: boolean
  /** An object store the caller owns (tests); otherwise S3 at platform.storage.s3.endpoint. */
  objectStore?: ObjectStore
  /** true: the demo console at `/` (npm run dev; never under the production profile). */
  console?: boolean
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

// Fastify accepts a hop count too, though its types only list booleans, addresses and functions.
function trustProxy(value: string): boolean | string {
  if (value === 'false') return false
  if (value === 'true') return true
  if (/^\d+$/.test(value)) return Number(value) as unknown as string
  return value
}

/**
 * Builds the application without listening. The registration order is the architecture:
 * configuration, errors and docs first (they must see every route), then infrastructure
 * decorators, then the routes.
 */
export async function buildApp(config: Config, deps: AppDependencies = {}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: {
      ...loggerOptions(deps.logLevel ?? 'info', config.auth.apiKey.headerName),
      stream: deps.logStream ?? standardOutput(),
    },
    genReqId: (request) => {
      const incoming = request.headers['x-request-id']
      // Most requests carry none: the pattern is tested only on a header that is there.
      return incoming !== undefined && typeof incoming === 'string' && REQUEST_ID.test(incoming)
        ? incoming
        : randomUUID()
    },
    logController: new LogController({ requestIdLogLabel: 'requestId', disableRequestLogging: true }),
    trustProxy: trustProxy(config.server.trustProxy),
    bodyLimit: 1024 * 1024,
    routerOptions: { maxParamLength: 256 }, // config keys run to 128 characters; a longer segment is 414
    connectionTimeout: 60_000,
    requestTimeout: 30_000,
    keepAliveTimeout: 72_000,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // The database plugin migrates on start (an embedded database's first start runs every
    // migration): on a busy machine that outlasts Fastify's 10 s default for a plugin to load.
    pluginTimeout: 120_000,
    schemaController: { compilersFactory: { buildValidator: validatorFor } },
    // The router's and the HTTP parser's own refusals answer from the error catalogue too.
    frameworkErrors: frameworkError,
    clientErrorHandler: clientError,
  })

  // While closing, responses to in-flight requests end their keep-alive connection, so the
  // server can finish draining instead of waiting for clients to hang up.
  let closing = false
  app.addHook('preClose', async () => {
    closing = true
  })
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })
  // Only JSON bodies are accepted: a cross-site form or text/plain "simple request" cannot reach
  // a state-changing route (this stands in for CSRF tokens).
  app.removeContentTypeParser('text/plain')

  // A CORS preflight never carries credentials (Fetch standard), so the preflight route that
  // @fastify/cors adds is public by its route config like any other open route.
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    if (methods.every((method) => method === 'OPTIONS')) route.config = { ...route.config, public: true }
  })

  // Third-party plugins.
  // The request id and the security headers (src/http/security-headers.ts) in the first onRequest
  // hook, so that every answer, a refusal of a later hook included, carries them.
  const securityHeaderValues = securityHeaders(config)
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id).headers(securityHeaderValues)
    done()
  })
  await app.register(cookie)
  if (config.web.cors.allowedOrigins.length > 0) {
    // Cross-origin use is opt-in: credentials only for the listed origins.
    await app.register(cors, {
      origin: config.web.cors.allowedOrigins,
      credentials: true,
      methods: ['GET', 'POST', 'PUT', 'DELETE'],
      allowedHeaders: [
        'content-type',
        'authorization',
        'x-request-id',
        config.auth.apiKey.headerName.toLowerCase(),
      ],
      exposedHeaders: ['x-request-id', 'retry-after'],
      maxAge: 600,
    })
  }

  // The app's own decorators, in dependency order.
  await app.register(configPlugin, { config, clock: deps.clock ?? systemClock })
  await app.register(errorsPlugin)
  // A POST with no body but a JSON content type is what most fetch wrappers send: on a route that
  // takes no body it is no body, not malformed JSON. Anything else goes to Fastify's own parser
  // (prototype poisoning refused).
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '' && !request.routeOptions.schema?.body) return done(null, undefined)
    return parseJson(request, body as string, done)
  })
  if (config.docs.enabled) await app.register(docsPlugin, { root: !deps.console })
  await app.register(dbPlugin, deps.database ? { database: deps.database } : {})
  await app.register(metricsPlugin)
  await app.register(healthPlugin)
  await app.register(backgroundPlugin)
  await app.register(mailPlugin, { transport: deps.mailTransport })
  await app.register(authzPlugin, { port: deps.authorization })
  await app.register(storagePlugin, { store: deps.objectStore })
  await app.register(housekeepingPlugin, { start: deps.startHousekeeping ?? true, rules: retentionRules })
  // Every domain service, built once (src/features/compose.ts).
  await app.register(servicesPlugin, {
    events: deps.events,
    authenticator: deps.authenticator,
    sessionVersionProvider: deps.sessionVersionProvider,
    passwordResetHandler: deps.passwordResetHandler,
    webhookResolve: deps.webhookResolve,
  })
  // The mail, authorization and webhook outbox workers, started and stopped in one order.
  await app.register(outboxWorkersPlugin, {
    start: {
      mail: deps.startMailWorker ?? true,
      authz: deps.startAuthzWorker ?? true,
      webhook: deps.startWebhookWorker ?? true,
    },
  })
  // The request path: the principal and the route guard, the tenant context, the declared rate
  // limits, idempotent replays.
  await app.register(authPlugin)
  await app.register(tenantPlugin)
  await app.register(rateLimitsPlugin)
  await app.register(idempotencyPlugin)

  // Routes.
  await app.register(sessionsFeature)
  await app.register(accountsFeature)
  await app.register(impersonationFeature)
  await app.register(passkeysFeature)
  await app.register(permissionChecksFeature)
  await app.register(organizationsFeature)
  await app.register(filesFeature)
  await app.register(purchaseRequestsFeature)
  await app.register(auditEventsFeature)
  await app.register(webhooksFeature)
  await app.register(machinePrincipalsFeature)
  await app.register(outboxStatusFeature)
  await app.register(federationFeature)
  await app.register(ssoFeature)
  await app.register(oauth2Feature)
  if (deps.console) {
    if (config.profile === 'production') throw new Error('the demo console is not served under production')
    // Loaded only when asked for: it bundles the console with esbuild, a development dependency.
    const { default: consolePlugin } = await import('./http/console.ts')
    await app.register(consolePlugin)
  }

  return app
}
