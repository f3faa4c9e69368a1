// Decorates `app.metrics` (a Prometheus registry of this instance), serves GET /metrics and writes
// the access-log line of every request; needs db for the pool and outbox gauges. Request durations
// are labelled by route pattern, never raw URL.
import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import { AppError, problemResponses } from '../errors.ts'
import { outboxCounts } from '../outbox/status.ts'

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Registry
  }
}

async function metricsPlugin(app: FastifyInstance) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })

  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration by route pattern, method and status',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  })

  const database = app.database
  new Gauge({
    name: 'db_pool_connections',
    help: 'Database pool connections by state',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      const stats = database.stats()
      this.set({ state: 'total' }, stats.total)
      this.set({ state: 'idle' }, stats.idle)
      this.set({ state: 'waiting' }, stats.waiting)
      this.set({ state: 'max' }, stats.max)
    },
  })

  // Read at scrape time from the database, so every instance reports the same backlog.
  const db = app.db
  new Gauge({
    name: 'outbox_messages',
    help: 'Outbox rows by kind (mail, authz) and state: pending, or dead_letter (given up)',
    labelNames: ['kind', 'state'] as const,
    registers: [registry],
    async collect() {
      for (const { kind, pending, deadLetters } of await outboxCounts(db)) {
        this.set({ kind, state: 'pending' }, pending)
        this.set({ kind, state: 'dead_letter' }, deadLetters)
      }
    },
  })

  app.decorate('metrics', registry)

  // The histogram's series of a method and route pattern, by status: made on first use and kept, so
  // an answered request costs two map reads instead of a labels object and its validation.
  type Series = ReturnType<typeof duration.labels>
  const seriesByRoute = new Map<string, Map<number, Series>>()
  function seriesOf(method: string, route: string, status: number): Series {
    const key = `${method} ${route}`
    let byStatus = seriesByRoute.get(key)
    if (!byStatus) {
      byStatus = new Map()
      seriesByRoute.set(key, byStatus)
    }
    let series = byStatus.get(status)
    if (!series) {
      series = duration.labels({ method, route, status_code: String(status) })
      byStatus.set(status, series)
    }
    return series
  }

  // One onResponse hook per request for both of its records: the access-log line (Fastify's own
  // logging writes two) and the duration.
  app.addHook('onResponse', (request, reply, done) => {
    const elapsed = reply.elapsedTime
    request.log.info({ req: request, res: reply, responseTime: elapsed }, 'request completed')
    seriesOf(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode).observe(
      elapsed / 1000,
    )
    done()
  })

  // Metrics tell an attacker a lot (routes, rates, pool sizes): with `platform.metrics.bearer-token`
  // set, /metrics needs `Authorization: Bearer <token>` (compared in constant time); under the
  // production profile without one, it is not served at all.
  const token = app.config.metrics.bearerToken
  if (!token && app.config.profile === 'production') return
  const expected = token ? createHash('sha256').update(`Bearer ${token}`).digest() : null

  app.get(
    '/metrics',
    {
      config: { public: true },
      schema: {
        tags: ['operations'],
        operationId: 'metrics',
        summary: 'Prometheus metrics (needs the bearer token when platform.metrics.bearer-token is set)',
        produces: ['text/plain'],
        response: {
          200: { description: 'Prometheus text exposition format', type: 'string' },
          ...problemResponses(401),
        },
      },
    },
    async (request, reply) => {
      if (expected) {
        const given = createHash('sha256')
          .update(request.headers.authorization ?? '')
          .digest()
        if (!timingSafeEqual(given, expected)) {
          throw new AppError('AUTHENTICATION_REQUIRED', '/metrics needs its bearer token')
        }
      }
      reply.type(registry.contentType)
      return registry.metrics()
    },
  )
}

export default fp(metricsPlugin, { name: 'metrics', fastify: '5.x', dependencies: ['db'] })
