import { randomUUID } from 'node:crypto'
import type { Writable } from 'node:stream'
import Fastify, { type FastifyInstance, LogController } from 'fastify'
import pino from 'pino'
import configPlugin from '../plugins/config.ts'
import dbPlugin from '../plugins/db.ts'
import docsPlugin from '../plugins/docs.ts'
import errorsPlugin from '../plugins/errors.ts'
import healthPlugin from '../plugins/health.ts'
import metricsPlugin from '../plugins/metrics.ts'
import { type Clock, systemClock } from './clock.ts'
import type { Config } from './config.ts'
import type { DatabaseHandle } from './db/database.ts'
import { loggerOptions } from './logger.ts'

export interface AppDependencies {
  clock?: Clock
  /** A database the caller owns and closes; otherwise the app opens the configured one. */
  database?: DatabaseHandle
  /** Log level (default `info`); `silent` turns logging off. */
  logLevel?: string
  /** Where log lines go (default stdout); tests capture them here. */
  logStream?: Writable
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
      // Asynchronous writes to stdout: a synchronous write per log line costs half the throughput.
      stream: deps.logStream ?? pino.destination({ dest: 1, sync: false }),
    },
    genReqId: (request) => {
      const incoming = request.headers['x-request-id']
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID()
    },
    logController: new LogController({ requestIdLogLabel: 'requestId' }),
    trustProxy: trustProxy(config.server.trustProxy),
    bodyLimit: 1024 * 1024,
    connectionTimeout: 60_000,
    requestTimeout: 30_000,
    keepAliveTimeout: 72_000,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    ajv: {
      customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true, allErrors: false },
    },
  })

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
  })
  // While closing, responses to in-flight requests end their keep-alive connection, so the
  // server can finish draining instead of waiting for clients to hang up.
  let closing = false
  app.addHook('preClose', async () => {
    closing = true
  })
  app.addHook('onSend', async (_request, reply) => {
    if (closing) reply.header('connection', 'close')
  })
  // Only JSON bodies are accepted: a cross-site form or text/plain "simple request" cannot reach
  // a state-changing route (spec 5.1 rule 4 relies on this instead of CSRF tokens).
  app.removeContentTypeParser('text/plain')

  await app.register(configPlugin, { config, clock: deps.clock ?? systemClock })
  await app.register(errorsPlugin)
  if (config.docs.enabled) await app.register(docsPlugin)
  await app.register(dbPlugin, deps.database ? { database: deps.database } : {})
  await app.register(metricsPlugin)
  await app.register(healthPlugin)

  return app
}
