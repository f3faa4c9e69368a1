import type { Config } from '../../config.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../../housekeeping/runner.ts'
import { deleteSpentEmailProofs } from './email-proof-repository.ts'
import { deleteSpentOneTimeTokens } from './one-time-tokens.ts'

/**
 * Retention of the accounts feature's one-time tokens (invitations and password resets): one used
 * or expired is kept `platform.retention.one-time-tokens`, then goes.
 */
export function oneTimeTokenRetention(config: Config): RetentionRule {
  const { oneTimeTokens } = config.retention
  return {
    name: 'one_time_tokens',
    sweep: (db, now) => deleteSpentOneTimeTokens(db, secondsBefore(now, oneTimeTokens), RETENTION_BATCH),
  }
}

/**
 * Retention of the mailed proofs (sign-up, email sign-in, email change): one used or expired is
 * kept as long as the one-time tokens, then goes.
 */
export function emailProofRetention(config: Config): RetentionRule {
  const { oneTimeTokens } = config.retention
  return {
    name: 'email_proofs',
    sweep: (db, now) => deleteSpentEmailProofs(db, secondsBefore(now, oneTimeTokens), RETENTION_BATCH),
  }
}
