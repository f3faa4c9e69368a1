// Serves /health/live and /health/ready and decorates `app.readiness` so each dependency's plugin
// adds its own check; needs db. Readiness fails with 503 SERVICE_UNAVAILABLE naming what is down.
import { type FastifyPluginAsyncTypebox, Type } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import { sql } from 'kysely'
import { AppError, problemResponses } from '../errors.ts'

export type ReadinessCheck = () => Promise<void>

declare module 'fastify' {
  interface FastifyInstance {
    readiness: {
      add(name: string, check: ReadinessCheck): void
      /** From now on /health/ready answers 503 (`shutdown`): the instance is draining before it stops. */
      drain(): void
    }
  }
}

const CHECK_TIMEOUT_MS = 2_000

const Health = Type.Object(
  {
    status: Type.Literal('UP'),
    checks: Type.Optional(Type.Record(Type.String(), Type.Literal('UP'))),
  },
  { $id: 'Health', title: 'Health', description: 'UP, with the state of each readiness check' },
)

async function withTimeout(check: ReadinessCheck): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('readiness check timed out')), CHECK_TIMEOUT_MS)
  })
  try {
    await Promise.race([check(), timeout])
  } finally {
    clearTimeout(timer)
  }
}

const healthPlugin: FastifyPluginAsyncTypebox = async (app) => {
  const checks = new Map<string, ReadinessCheck>()
  let draining = false
  app.decorate('readiness', {
    add: (name: string, check: ReadinessCheck) => void checks.set(name, check),
    drain: () => {
      draining = true
    },
  })
  app.readiness.add('database', async () => {
    if (app.migrations.pending) throw new Error('The database has not been migrated yet')
    await sql`select 1`.execute(app.db)
  })

  app.get(
    '/health/live',
    {
      config: { public: true },
      schema: {
        tags: ['operations'],
        operationId: 'healthLive',
        summary: 'Liveness: the process answers',
        response: { 200: Health },
      },
    },
    async () => ({ status: 'UP' as const }),
  )

  app.get(
    '/health/ready',
    {
      config: { public: true },
      schema: {
        tags: ['operations'],
        operationId: 'healthReady',
        summary: 'Readiness: every dependency answers',
        response: { 200: Health, ...problemResponses(503) },
      },
    },
    async (request) => {
      if (draining) {
        throw new AppError('SERVICE_UNAVAILABLE', 'Not ready: shutting down', {
          extensions: { checks: { shutdown: 'DOWN' } },
          headers: { 'retry-after': '5' },
        })
      }
      const results = await Promise.all(
        [...checks].map(async ([name, check]) => {
          try {
            await withTimeout(check)
            return [name, 'UP'] as const
          } catch (error) {
            request.log.warn({ err: error, check: name }, 'readiness check failed')
            return [name, 'DOWN'] as const
          }
        }),
      )
      const down = results.filter(([, status]) => status === 'DOWN').map(([name]) => name)
      if (down.length > 0) {
        throw new AppError('SERVICE_UNAVAILABLE', `Not ready: ${down.join(', ')}`, {
          extensions: { checks: Object.fromEntries(results) },
          headers: { 'retry-after': '5' },
        })
      }
      return { status: 'UP' as const, checks: Object.fromEntries(results) as Record<string, 'UP'> }
    },
  )
}

export default fp(healthPlugin, { name: 'health', fastify: '5.x', dependencies: ['db'] })
