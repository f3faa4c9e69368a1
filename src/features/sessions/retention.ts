import type { Config } from '../../config.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../../housekeeping/runner.ts'
import { deleteDeadRefreshTokens, deleteEndedSessions } from './repository.ts'

// What the sessions feature's tables keep, as the housekeeping worker prunes them.

/** Refresh tokens expired in a session that has ended go at once: nothing can use them again. */
export const refreshTokenRetention: RetentionRule = {
  name: 'refresh_tokens',
  sweep: (db, now) => deleteDeadRefreshTokens(db, now, RETENTION_BATCH),
}

/**
 * An ended session (a soft delete: revoked or expired) is kept `platform.retention.sessions`, the
 * audit window, then goes with its tokens.
 */
export function sessionRetention(config: Config): RetentionRule {
  const { sessions } = config.retention
  return {
    name: 'sessions',
    sweep: (db, now) => deleteEndedSessions(db, secondsBefore(now, sessions), RETENTION_BATCH),
  }
}
