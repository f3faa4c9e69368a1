import { RETENTION_BATCH, type RetentionRule } from '../../housekeeping/runner.ts'
import { deleteExpiredChallenges } from './repository.ts'

/**
 * Retention of the passkeys feature's challenges: a ceremony's challenge is used once or expires,
 * so nothing is kept past its expiry.
 */
export const passkeyChallengeRetention: RetentionRule = {
  name: 'passkey_challenges',
  sweep: (db, now) => deleteExpiredChallenges(db, now, RETENTION_BATCH),
}
