import type { Kysely } from 'kysely'
import type { Config } from '../../config.ts'
import type { Database } from '../../db/schema.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../../housekeeping/runner.ts'
import type { ObjectStore } from '../../storage/port.ts'
import { deleteUnfinishedFiles, findUnfinishedFiles } from './repository.ts'
import { stagingKey } from './service.ts'

/**
 * Retention of the files feature's uploads: one nobody confirmed within
 * `platform.retention.pending-uploads` of its address's expiry goes, its objects with it.
 */
export function unfinishedUploadRetention(config: Config, store: ObjectStore): RetentionRule {
  const uploadWindow = config.storage.uploadUrlTtl + config.retention.pendingUploads
  return {
    name: 'files',
    sweep: (db, now) => sweepUnfinishedFiles(db, store, secondsBefore(now, uploadWindow)),
  }
}

/**
 * Unfinished uploads started before the cutoff: their bytes first (the staged upload, and the copy
 * a refused confirm may have left), then the rows. A store that is down fails the sweep and leaves
 * the rows for the next run, so no object is ever orphaned by a row deleted before it; a confirm
 * that wins meanwhile keeps its row.
 */
async function sweepUnfinishedFiles(db: Kysely<Database>, store: ObjectStore, cutoff: Date): Promise<number> {
  const files = await findUnfinishedFiles(db, cutoff, RETENTION_BATCH)
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
