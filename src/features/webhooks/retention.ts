import type { Config } from '../../config.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../../housekeeping/runner.ts'
import { deleteOldDeliveries } from './repository.ts'

/**
 * Retention of the webhooks feature's deliveries: a message delivered or dead-lettered, and an
 * attempt, is kept `platform.retention.webhook-deliveries`, then goes.
 */
export function webhookDeliveryRetention(config: Config): RetentionRule {
  const { webhookDeliveries } = config.retention
  return {
    name: 'webhook_deliveries',
    sweep: (db, now) => deleteOldDeliveries(db, secondsBefore(now, webhookDeliveries), RETENTION_BATCH),
  }
}
