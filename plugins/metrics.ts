// Decorates `app.metrics` (a Prometheus registry of this instance) and serves GET /metrics;
// needs db for the pool gauges. Request durations are labelled by route pattern, never raw URL.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'

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

  app.decorate('metrics', registry)

  app.addHook('onResponse', async (request, reply) => {
    duration.observe(
      {
        method: request.method,
        route: request.routeOptions.url ?? 'unmatched',
        status_code: String(reply.statusCode),
      },
      reply.elapsedTime / 1000,
    )
  })

  app.get(
    '/metrics',
    {
      schema: {
        tags: ['operations'],
        operationId: 'metrics',
        summary: 'Prometheus metrics',
        produces: ['text/plain'],
        response: { 200: { description: 'Prometheus text exposition format', type: 'string' } },
      },
    },
    async (_request, reply) => {
      reply.type(registry.contentType)
      return registry.metrics()
    },
  )
}

export default fp(metricsPlugin, { name: 'metrics', fastify: '5.x', dependencies: ['db'] })
