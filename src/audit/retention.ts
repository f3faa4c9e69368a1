import type { Config } from '../config.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../housekeeping/runner.ts'
import { deleteOldEvents } from './repository.ts'

/**
 * Retention of the audit trail: an event is kept `platform.retention.audit-events`, and goes from the
 * start of its chain only, so what is kept still verifies.
 */
export function auditEventRetention(config: Config): RetentionRule {
  const { auditEvents } = config.retention
  return {
    name: 'audit_events',
    sweep: (db, now) => deleteOldEvents(db, secondsBefore(now, auditEvents), RETENTION_BATCH),
  }
}
