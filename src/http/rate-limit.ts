import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import type { Database } from '../db/schema.ts'
import type { LimitsInStatement, StatementLimits } from '../db/statement-limits.ts'
import { AppError } from '../errors.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../housekeeping/runner.ts'
import { deleteRateLimitsBefore, hitRateLimit, hitsInStatement, unhitRateLimit } from './rate-limit-store.ts'

/** The fixed windows a limit counts in, in seconds. */
export const RATE_LIMIT_WINDOWS = { minute: 60, hour: 3600 } as const
export type RateLimitWindow = keyof typeof RATE_LIMIT_WINDOWS

/**
 * A limit as a route declares it (route config `rateLimit`), enforced before the handler runs by
 * src/http/rate-limits.ts. The counter is `<name>:<value>`, the value being the client address or a
 * body field.
 */
export interface RateLimitRule {
  name: string
  /**
   * What is counted: the client address, or a body field, dotted to reach into an object
   * (`caseless`: trimmed and lower-cased, for emails).
   */
  by: 'ip' | { field: string; caseless?: boolean; optional?: boolean }
  /** The configured allowance (platform.auth.rate-limit.*). */
  max: keyof Config['auth']['rateLimit']
  window: RateLimitWindow
  /** Only failures count: a successful request gives its hit back (the per-IP login limit). */
  failuresOnly?: boolean
  /**
   * Counted by the handler's own statement instead of one of its own before the handler: the
   * preHandler skips the rule and the handler must pass `statementLimits(request, config)` to its
   * service, whose statement includes the hits and guards its work with them. Not with
   * `failuresOnly` (nothing gives such a hit back).
   */
  inStatement?: boolean
}

/**
 * Whether the rule counts this request: a rule by an `optional` body field counts only requests
 * that carry it (a verify endpoint taking an address and code, or a link's token alone).
 */
export function ruleApplies(rule: RateLimitRule, request: { body?: unknown }): boolean {
  if (rule.by === 'ip' || !rule.by.optional) return true
  let found: unknown = request.body
  for (const part of rule.by.field.split('.')) found = (found as Record<string, unknown> | undefined)?.[part]
  return typeof found === 'string'
}

/** The concrete limits of a request under the route's rules. */
export function limitsFor(
  rules: readonly RateLimitRule[],
  config: Config,
  request: { ip: string; body?: unknown },
): Limit[] {
  return rules.map((rule) => {
    let value = request.ip
    if (rule.by !== 'ip') {
      // A dotted name reaches into an object of the body (`response.id`).
      let found: unknown = request.body
      for (const part of rule.by.field.split('.'))
        found = (found as Record<string, unknown> | undefined)?.[part]
      const field = typeof found === 'string' ? found : String(found ?? '')
      value = rule.by.caseless ? field.trim().toLowerCase() : field
    }
    return {
      key: `${rule.name}:${value}`,
      max: config.auth.rateLimit[rule.max],
      windowSeconds: RATE_LIMIT_WINDOWS[rule.window],
    }
  })
}

export interface Limit {
  /** Counter name, e.g. `login:ip:203.0.113.9`. */
  key: string
  max: number
  windowSeconds: number
}

/** The start of the fixed window `now` (ms) falls in. */
const windowStartOf = (limit: Limit, now: number) =>
  Math.floor(now / (limit.windowSeconds * 1000)) * limit.windowSeconds * 1000

/** 429 RATE_LIMITED, with Retry-After the seconds until the window ends. */
function rateLimited(limit: Limit, windowStart: number, now: number): AppError {
  const retryAfter = Math.max(1, Math.ceil((windowStart + limit.windowSeconds * 1000 - now) / 1000))
  return new AppError('RATE_LIMITED', 'Too many attempts; try again later', {
    headers: { 'retry-after': String(retryAfter) },
  })
}

/**
 * Fixed-window limits stored in PostgreSQL, so every instance on the database shares them. Each
 * limit is counted (one statement each) and the first exceeded one answers 429 RATE_LIMITED with
 * Retry-After. Callers check limits before any expensive work such as hashing a password.
 */
export async function enforceRateLimits(
  db: Kysely<Database>,
  clock: Clock,
  limits: Limit[],
): Promise<CountedHit[]> {
  const now = clock.now().getTime()
  const counted: CountedHit[] = []
  for (const limit of limits) {
    const windowStart = windowStartOf(limit, now)
    const count = await hitRateLimit(db, limit.key, new Date(windowStart))
    counted.push({ key: limit.key, windowStart: new Date(windowStart) })
    if (count > limit.max) throw rateLimited(limit, windowStart, now)
  }
  return counted
}

/**
 * The route's rules marked `inStatement` as the port the handler hands its service
 * (src/db/statement-limits.ts): the service renders them at its own `now` (`countInStatement`)
 * and counts them in its statement.
 */
export function statementLimits(
  request: { ip: string; body?: unknown; routeOptions: { config: { rateLimit?: readonly RateLimitRule[] } } },
  config: Config,
): StatementLimits {
  const rules = request.routeOptions.config.rateLimit?.filter((rule) => rule.inStatement) ?? []
  const limits = rules.length === 0 ? [] : limitsFor(rules, config, request)
  return { none: limits.length === 0, at: (now) => countInStatement(limits, now) }
}

/**
 * `limits` to be counted in the handler's one statement at `now` (the windows it falls in): the
 * statement includes `hits.ctes`, does its work only where `hits.within` holds, returns
 * `hits.counts`, and its caller calls `check` on them before anything else. Same counting and
 * answer as the preHandler's, without a round trip of its own: `check` throws 429 RATE_LIMITED with
 * Retry-After as `enforceRateLimits` answers.
 */
export function countInStatement(limits: readonly Limit[], now: Date): LimitsInStatement {
  const at = now.getTime()
  const starts = limits.map((limit) => windowStartOf(limit, at))
  return {
    hits: hitsInStatement(
      limits.map((limit, index) => ({
        key: limit.key,
        windowStart: new Date(starts[index] as number),
        max: limit.max,
      })),
    ),
    check(counts) {
      for (const [index, limit] of limits.entries()) {
        const count = counts[index]
        // A count missing is a hit not counted after an exceeded one: never a pass.
        if (count === null || count === undefined || count > limit.max)
          throw rateLimited(limit, starts[index] as number, at)
      }
    },
  }
}

/** A hit counted by `enforceRateLimits`, which a limit that counts only failures may give back. */
export interface CountedHit {
  key: string
  windowStart: Date
}

/**
 * Gives back hits of limits that count failures only (the per-IP login limit): each
 * attempt is counted before the expensive work, so parallel attempts cannot pass the limit, and a
 * success takes its hit back. A window that has rolled over since keeps its count.
 */
export async function giveBack(db: Kysely<Database>, hits: CountedHit[]): Promise<void> {
  for (const hit of hits) await unhitRateLimit(db, hit.key, hit.windowStart)
}

/** The longest window a limit can use: counters older than it are kept for nothing. */
export const LONGEST_WINDOW_SECONDS = Math.max(...Object.values(RATE_LIMIT_WINDOWS))

/** Retention: a counter whose window has passed counts nothing any more. */
export const rateLimitRetention: RetentionRule = {
  name: 'rate_limits',
  sweep: (db, now) => deleteRateLimitsBefore(db, secondsBefore(now, LONGEST_WINDOW_SECONDS), RETENTION_BATCH),
}
