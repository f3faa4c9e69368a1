// Enforces the rate limits routes declare in their config (`rateLimit: RateLimitRule[]`), in an
// app-wide preHandler hook that reads the matched route's config: after the body is validated
// (limits may count a body field) and before the route's own hooks and handler, so no password is
// hashed for a request over its limit. Registered before the idempotency plugin, whose claim comes
// after it. Limits whose rule counts failures
// only give their hit back when the answer is a success. Needs config and db.
import type { FastifyInstance, FastifyRequest } from 'fastify'
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

  const enforce = async (request: FastifyRequest, rules: readonly RateLimitRule[]) => {
    const hits = await enforceRateLimits(db, clock, limitsFor(rules, config, request))
    const refunds = hits.filter((_hit, index) => rules[index]?.failuresOnly)
    if (refunds.length > 0) request.rateLimitRefunds = refunds
  }
  // Callback-style, so a route without limits passes through without a promise.
  app.addHook('preHandler', (request, _reply, done) => {
    // Rules marked `inStatement` are counted by the handler's own statement.
    const rules = request.routeOptions.config.rateLimit?.filter((rule) => !rule.inStatement)
    if (!rules?.length) return done()
    enforce(request, rules).then(() => done(), done)
  })
  // Given back before the answer leaves, so a client's next request already sees it.
  app.addHook('onSend', (request, reply, payload, done) => {
    const refunds = request.rateLimitRefunds
    if (!refunds || reply.statusCode >= 400) return done(null, payload)
    request.rateLimitRefunds = null
    giveBack(db, refunds)
      .catch((error: unknown) => request.log.warn({ err: error }, 'giving back a rate-limit hit failed'))
      .then(() => done(null, payload))
  })
}

export default fp(rateLimitsPlugin, { name: 'rate-limits', fastify: '5.x', dependencies: ['config', 'db'] })
