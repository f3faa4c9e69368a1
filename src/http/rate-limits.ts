// Enforces the rate limits routes declare in their config (`rateLimit: RateLimitRule[]`), in a
// preHandler hook of each such route: after the body is validated (limits may count a body field) and before the
// handler, so no password is hashed for a request over its limit. Limits whose rule counts failures
// only give their hit back when the answer is a success. Needs config and db.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { type CountedHit, enforceRateLimits, giveBack, limitsFor, type RateLimitRule } from './rate-limit.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The limits this route counts, checked in order; the first exceeded answers 429 RATE_LIMITED. */
    rateLimit?: readonly RateLimitRule[]
  }
  interface FastifyRequest {
    /** Hits to give back if the request succeeds (rules with `failuresOnly`). */
    rateLimitRefunds: CountedHit[] | null
  }
}

async function rateLimitsPlugin(app: FastifyInstance) {
  const { config, clock, db } = app
  app.decorateRequest('rateLimitRefunds', null)

  // Hooks of the routes that declare limits only: the others pay nothing for them.
  const enforce = async (request: FastifyRequest) => {
    const rules = request.routeOptions.config.rateLimit ?? []
    const hits = await enforceRateLimits(db, clock, limitsFor(rules, config, request))
    const refunds = hits.filter((_hit, index) => rules[index]?.failuresOnly)
    if (refunds.length > 0) request.rateLimitRefunds = refunds
  }
  // Given back before the answer leaves, so a client's next request already sees it.
  const refund = async (request: FastifyRequest, reply: FastifyReply) => {
    const refunds = request.rateLimitRefunds
    if (!refunds || reply.statusCode >= 400) return
    request.rateLimitRefunds = null
    await giveBack(db, refunds).catch((error: unknown) =>
      request.log.warn({ err: error }, 'giving back a rate-limit hit failed'),
    )
  }
  app.addHook('onRoute', (route) => {
    if (!route.config?.rateLimit?.length) return
    // First among the route's own hooks: no other work for a request over its limit.
    route.preHandler = [enforce, ...hooksOf(route.preHandler)] as typeof route.preHandler
    route.onSend = [refund, ...hooksOf(route.onSend)] as typeof route.onSend
  })
}

/** A route option's hooks as a list (Fastify takes one function or an array). */
export function hooksOf<T>(hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return []
  return Array.isArray(hooks) ? hooks : [hooks]
}

export default fp(rateLimitsPlugin, { name: 'rate-limits', fastify: '5.x', dependencies: ['config', 'db'] })
