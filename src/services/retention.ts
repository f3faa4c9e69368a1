import type { Config } from '../config.ts'
import {
  deleteDeadRefreshTokens,
  deleteEndedSessions,
  deleteFinishedMail,
  deleteProcessedTupleChanges,
  deleteSpentOneTimeTokens,
} from '../repositories/retention.ts'
import type { RetentionRule } from './housekeeping.ts'
import { rateLimitRetention } from './rate-limit.ts'

const BATCH = 500

const before = (now: Date, seconds: number) => new Date(now.getTime() - seconds * 1000)

/**
 * What may go from each table that grows with traffic, and after how long
 * (`platform.retention.*`). Kept for the configured window: revoked sessions (soft deletes, spec
 * 3.2) and delivered outbox rows, for audit and support; purchase-request audit rows are never
 * removed.
 */
export function retentionRules(config: Config): RetentionRule[] {
  const { outbox, sessions, oneTimeTokens } = config.retention
  return [
    {
      name: 'authz_outbox',
      sweep: (db, now) => deleteProcessedTupleChanges(db, before(now, outbox), BATCH),
    },
    { name: 'mail_outbox', sweep: (db, now) => deleteFinishedMail(db, before(now, outbox), BATCH) },
    { name: 'refresh_tokens', sweep: (db, now) => deleteDeadRefreshTokens(db, now, BATCH) },
    { name: 'sessions', sweep: (db, now) => deleteEndedSessions(db, before(now, sessions), BATCH) },
    {
      name: 'one_time_tokens',
      sweep: (db, now) => deleteSpentOneTimeTokens(db, before(now, oneTimeTokens), BATCH),
    },
    rateLimitRetention,
  ]
}
