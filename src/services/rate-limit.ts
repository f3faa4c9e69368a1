import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database } from '../db/schema.ts'
import { AppError } from '../errors.ts'
import { hitRateLimit } from '../repositories/rate-limits.ts'

export interface Limit {
  /** Counter name, e.g. `login:ip:203.0.113.9`. */
  key: string
  max: number
  windowSeconds: number
}

/**
 * Fixed-window limits stored in PostgreSQL, so every instance on the database shares them. Each
 * limit is counted (one statement each) and the first exceeded one answers 429 RATE_LIMITED with
 * Retry-After. Callers check limits before any expensive work such as hashing a password.
 */
export async function enforceRateLimits(db: Kysely<Database>, clock: Clock, limits: Limit[]): Promise<void> {
  const now = clock.now().getTime()
  for (const limit of limits) {
    const windowMs = limit.windowSeconds * 1000
    const windowStart = Math.floor(now / windowMs) * windowMs
    const count = await hitRateLimit(db, limit.key, new Date(windowStart))
    if (count > limit.max) {
      const retryAfter = Math.max(1, Math.ceil((windowStart + windowMs - now) / 1000))
      throw new AppError('RATE_LIMITED', 'Too many attempts; try again later', {
        headers: { 'retry-after': String(retryAfter) },
      })
    }
  }
}
