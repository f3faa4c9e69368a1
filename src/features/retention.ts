import { auditEventRetention } from '../audit/index.ts'
import { tupleOutboxRetention } from '../authz/outbox-worker.ts'
import type { Config } from '../config.ts'
import type { RetentionRule } from '../housekeeping/runner.ts'
import { idempotencyKeyRetention } from '../http/idempotency.ts'
import { rateLimitRetention } from '../http/rate-limit.ts'
import { mailOutboxRetention } from '../mail/outbox.ts'
import type { ObjectStore } from '../storage/port.ts'
import { emailProofRetention, oneTimeTokenRetention } from './accounts/index.ts'
import { oidcFlowRetention } from './federation/index.ts'
import { unfinishedUploadRetention } from './files/index.ts'
import { passkeyChallengeRetention } from './passkeys/index.ts'
import { refreshTokenRetention, sessionRetention } from './sessions/index.ts'
import { webhookDeliveryRetention } from './webhooks/index.ts'

/**
 * The retention rules the housekeeping worker runs, in the order it runs them: each room that owns
 * a table that grows with traffic declares what may go from it and after how long
 * (`platform.retention.*`), next to its SQL. Kept for the configured window: revoked sessions (soft
 * deletes) and delivered outbox rows, for audit and support; purchase-request audit rows are never
 * removed.
 */
export function retentionRules(config: Config, deps: { store: ObjectStore }): RetentionRule[] {
  return [
    tupleOutboxRetention(config),
    mailOutboxRetention(config),
    refreshTokenRetention,
    sessionRetention(config),
    oneTimeTokenRetention(config),
    emailProofRetention(config),
    unfinishedUploadRetention(config, deps.store),
    idempotencyKeyRetention(config),
    auditEventRetention(config),
    webhookDeliveryRetention(config),
    passkeyChallengeRetention,
    oidcFlowRetention,
    rateLimitRetention,
  ]
}
