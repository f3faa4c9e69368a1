import type { ColumnType } from 'kysely'
import type { Timestamp } from '../db/schema.ts'

// The file table (migration 0008); assembled into `Database` in src/db/schema.ts.

/**
 * The file lifecycle: PENDING from initiate until confirm finds the bytes; then CONFIRMED (size
 * recorded), or REJECTED when the object was larger than platform.storage.max-file-size (the
 * object is deleted). CONFIRMED and REJECTED are final.
 */
export type FileStatus = 'PENDING' | 'CONFIRMED' | 'REJECTED'

export interface FileTable {
  id: string
  organization_id: string
  resource_type: string
  resource_id: string
  object_key: string
  original_file_name: string
  content_type: string
  status: FileStatus
  /** bigint: int8 stays a string on both drivers; null until confirm. */
  size_bytes: ColumnType<string | null, number | null | undefined, number | null>
  /** The principal id of the uploader (a user id or an API key id). */
  created_by: string
  created_at: Timestamp
  confirmed_at: Timestamp | null
}
