import type { Insertable, Selectable } from 'kysely'
import type { Executor, FileTable } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'

// File metadata. Every statement names the tenant's organization: a file id alone never reaches
// another organization's row.

export type FileRow = Selectable<FileTable>

export function insertFile(
  db: Executor,
  tenant: TenantScope,
  values: Omit<Insertable<FileTable>, 'organization_id'>,
): Promise<FileRow> {
  return db
    .insertInto('files')
    .values({ ...values, organization_id: tenant.organizationId })
    .returningAll()
    .executeTakeFirstOrThrow()
}

export function findFile(db: Executor, tenant: TenantScope, id: string): Promise<FileRow | undefined> {
  return db
    .selectFrom('files')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .executeTakeFirst()
}

/** PENDING -> CONFIRMED; undefined when the file was not PENDING any more (a concurrent confirm). */
export function markFileConfirmed(
  db: Executor,
  tenant: TenantScope,
  id: string,
  values: { sizeBytes: number; now: Date },
): Promise<FileRow | undefined> {
  return db
    .updateTable('files')
    .set({ status: 'CONFIRMED', size_bytes: values.sizeBytes, confirmed_at: values.now })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .where('status', '=', 'PENDING')
    .returningAll()
    .executeTakeFirst()
}

/** PENDING -> REJECTED, recording the size that was refused. */
export function markFileRejected(
  db: Executor,
  tenant: TenantScope,
  id: string,
  sizeBytes: number,
): Promise<FileRow | undefined> {
  return db
    .updateTable('files')
    .set({ status: 'REJECTED', size_bytes: sizeBytes })
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .where('status', '=', 'PENDING')
    .returningAll()
    .executeTakeFirst()
}

/** A resource's confirmed files, oldest first. */
export function listConfirmedFiles(
  db: Executor,
  tenant: TenantScope,
  resourceType: string,
  resourceId: string,
): Promise<FileRow[]> {
  return db
    .selectFrom('files')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('resource_type', '=', resourceType)
    .where('resource_id', '=', resourceId)
    .where('status', '=', 'CONFIRMED')
    .orderBy('created_at')
    .orderBy('id')
    .execute()
}

/**
 * Uploads never confirmed (PENDING, or REJECTED as too large) that were started before the cutoff,
 * in every organization (the retention sweep).
 */
export function findUnfinishedFiles(
  db: Executor,
  cutoff: Date,
  limit: number,
): Promise<{ id: string; object_key: string; status: string }[]> {
  return db
    .selectFrom('files')
    .select(['id', 'object_key', 'status'])
    .where('status', '<>', 'CONFIRMED')
    .where('created_at', '<', cutoff)
    .orderBy('created_at')
    .limit(limit)
    .execute()
}

/** Deletes those of the given files that are still unfinished (a confirm may have won since). */
export async function deleteUnfinishedFiles(db: Executor, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0
  const result = await db
    .deleteFrom('files')
    .where('id', 'in', ids)
    .where('status', '<>', 'CONFIRMED')
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
