import type { Kysely } from 'kysely'
import { deleteOldEvents } from '../../audit/index.ts'
import type { Config } from '../../config.ts'
import type { Database } from '../../db/schema.ts'
import type { RetentionRule } from '../../housekeeping/runner.ts'
import { deleteExpiredIdempotencyKeys } from '../../http/idempotency-store.ts'
import { rateLimitRetention } from '../../http/rate-limit.ts'
import type { ObjectStore } from '../../storage/port.ts'
import { deleteSpentEmailProofs } from '../accounts/index.ts'
import { stagingKey } from '../files/index.ts'
import { deleteExpiredChallenges } from '../passkeys/index.ts'
import { deleteOldDeliveries } from '../webhooks/index.ts'
import {
  deleteDeadRefreshTokens,
  deleteEndedSessions,
  deleteFinishedMail,
  deleteProcessedTupleChanges,
  deleteSpentOneTimeTokens,
  deleteUnfinishedFiles,
  findUnfinishedFiles,
} from './repository.ts'

const BATCH = 500

const before = (now: Date, seconds: number) => new Date(now.getTime() - seconds * 1000)

/**
 * What may go from each table that grows with traffic, and after how long
 * (`platform.retention.*`). Kept for the configured window: revoked sessions (soft deletes)
 * and delivered outbox rows, for audit and support; purchase-request audit rows are never
 * removed.
 */
export function retentionRules(config: Config, deps: { store: ObjectStore }): RetentionRule[] {
  const { outbox, sessions, oneTimeTokens, pendingUploads, idempotencyKeys, auditEvents, webhookDeliveries } =
    config.retention
  const uploadWindow = config.storage.uploadUrlTtl + pendingUploads
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
    // Sign-up, email sign-in and email change proofs, used or expired: as long as the other links.
    {
      name: 'email_proofs',
      sweep: (db, now) => deleteSpentEmailProofs(db, before(now, oneTimeTokens), BATCH),
    },
    {
      name: 'files',
      sweep: (db, now) => sweepUnfinishedFiles(db, deps.store, before(now, uploadWindow)),
    },
    {
      name: 'idempotency_keys',
      sweep: (db, now) => deleteExpiredIdempotencyKeys(db, before(now, idempotencyKeys), BATCH),
    },
    // From the start of each chain only, so what is kept still verifies.
    { name: 'audit_events', sweep: (db, now) => deleteOldEvents(db, before(now, auditEvents), BATCH) },
    {
      name: 'webhook_deliveries',
      sweep: (db, now) => deleteOldDeliveries(db, before(now, webhookDeliveries), BATCH),
    },
    // A ceremony's challenge is used once or expires: nothing is kept past its expiry.
    { name: 'passkey_challenges', sweep: (db, now) => deleteExpiredChallenges(db, now, BATCH) },
    rateLimitRetention,
  ]
}

/**
 * Uploads nobody confirmed within `platform.retention.pending-uploads` of their address's expiry:
 * their bytes first (the staged upload, and the copy a refused confirm may have left), then the
 * rows. A store that is down fails the sweep and leaves the rows for the next run, so no object is
 * ever orphaned by a row deleted before it; a confirm that wins meanwhile keeps its row.
 */
async function sweepUnfinishedFiles(db: Kysely<Database>, store: ObjectStore, cutoff: Date): Promise<number> {
  const files = await findUnfinishedFiles(db, cutoff, BATCH)
  // Several deletes at a time: one after the other could not keep pace with abandoned uploads (the
  // soak saw this rule take whole minutes and hold up every rule after it).
  await store.deleteMany(
    files.flatMap((file) =>
      file.status === 'REJECTED'
        ? [stagingKey(file.object_key), file.object_key]
        : [stagingKey(file.object_key)],
    ),
  )
  return deleteUnfinishedFiles(
    db,
    files.map((file) => file.id),
  )
}
