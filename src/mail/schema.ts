import type { ColumnType, Generated } from 'kysely'
import type { Timestamp } from '../db/schema.ts'

// The mail outbox table (migration 0005); assembled into `Database` in src/db/schema.ts.

/** Template data as stored: any JSON object, written as a JSON string, read back parsed. */
export type MailData = ColumnType<Record<string, unknown>, string, string>

export interface MailOutboxTable {
  /** bigserial: int8 stays a string on both drivers. */
  id: Generated<string>
  template: string
  recipient: string
  data: MailData
  organization_id: string | null
  created_at: Timestamp
  /** Delivery attempts started (counted when a row is claimed). */
  attempts: Generated<number>
  next_attempt_at: Timestamp
  /** Set while a worker holds the row; an expired lease makes the row claimable again. */
  lease_until: Timestamp | null
  sent_at: Timestamp | null
  /** Set when delivery was given up (attempts exhausted, or a message that can never be rendered). */
  failed_at: Timestamp | null
  last_error: string | null
  /** Stable across retries: the left part of the Message-ID header. */
  message_id: Generated<string>
}
