// Enforces the rate limits routes declare in their config (`rateLimit: RateLimitRule[]`), in a
// preHandler hook added to those routes only (onRoute): after the body is validated (limits may
// count a body field) and before the route's own hooks and handler, so no password is hashed for a
// request over its limit. Registered before the idempotency plugin, whose claim comes after it.
// Limits whose rule counts failures only give their hit back when the answer is a success. Needs
// config and db.
import type { FastifyInstance, FastifyRequest, onSendHookHandler, preHandlerHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import {
  type CountedHit,
  enforceRateLimits,
  giveBack,
  limitsFor,
  type RateLimitRule,
  ruleApplies,
} from './rate-limit.ts'

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

const rateLimitHooks = new WeakSet<preHandlerHookHandler>()

/** Where a hook that must run after a route's rate limits goes in its preHandler list. */
export function afterRateLimits(preHandler: readonly unknown[]): number {
  let index = 0
  preHandler.forEach((hook, at) => {
    if (rateLimitHooks.has(hook as preHandlerHookHandler)) index = at + 1
  })
  return index
}

async function rateLimitsPlugin(app: FastifyInstance) {
  const { config, clock, db } = app
  app.decorateRequest('rateLimitRefunds', null)

  const enforce = async (request: FastifyRequest, declared: readonly RateLimitRule[]) => {
    const rules = declared.filter((rule) => ruleApplies(rule, request))
    const hits = await enforceRateLimits(db, clock, limitsFor(rules, config, request))
    const refunds = hits.filter((_hit, index) => rules[index]?.failuresOnly)
    if (refunds.length > 0) request.rateLimitRefunds = refunds
  }
  // One hook per route, over the rules counted here: rules marked `inStatement` are counted by the
  // handler's own statement.
  const limitHook = (rules: readonly RateLimitRule[]): preHandlerHookHandler => {
    const limit: preHandlerHookHandler = (request, _reply, done) => {
      enforce(request, rules).then(() => done(), done)
    }
    rateLimitHooks.add(limit)
    return limit
  }
  // Given back before the answer leaves, so a client's next request already sees it.
  const refund: onSendHookHandler = (request, reply, payload, done) => {
    const refunds = request.rateLimitRefunds
    if (!refunds || reply.statusCode >= 400) return done(null, payload)
    request.rateLimitRefunds = null
    giveBack(db, refunds)
      .catch((error: unknown) => request.log.warn({ err: error }, 'giving back a rate-limit hit failed'))
      .then(() => done(null, payload))
  }
  // Only the routes that declare limits get the hooks; the refund only where a rule counts
  // failures. They run before the route's own hooks of the same kind (none declared today).
  app.addHook('onRoute', (route) => {
    const rules = route.config?.rateLimit?.filter((rule) => !rule.inStatement)
    if (!rules?.length) return
    route.preHandler = [limitHook(rules), ...[route.preHandler ?? []].flat()]
    if (rules.some((rule) => rule.failuresOnly)) route.onSend = [refund, ...[route.onSend ?? []].flat()]
  })
}

export default fp(rateLimitsPlugin, { name: 'rate-limits', fastify: '5.x', dependencies: ['config', 'db'] })
