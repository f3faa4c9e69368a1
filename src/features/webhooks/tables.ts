import type { ColumnType, Generated, RawBuilder } from 'kysely'
import type { Timestamp } from '../../db/schema.ts'

// The feature's tables (migrations 0025 and 0032), added to the `Database` interface from here. Every row
// carries its organization.

/** Why the service disabled an endpoint: it answered 410 Gone, or it kept failing. */
export type DisabledReason = 'gone' | 'failing'

export interface WebhookEndpointTable {
  id: Generated<string>
  organization_id: string
  url: string
  description: Generated<string>
  event_types: string[]
  enabled: Generated<boolean>
  disabled_reason: DisabledReason | null
  /** Sealed with the webhook secret box; never readable at rest. */
  secret: string
  previous_secret: string | null
  previous_secret_expires_at: Timestamp | null
  consecutive_failures: Generated<number>
  failing_since: Timestamp | null
  created_at: Timestamp
  updated_at: Timestamp
  /** int8 as text: the last audit event position given out when it was created (null: created before). */
  audit_position: ColumnType<string | null, RawBuilder<unknown> | null | undefined, never>
}

export interface WebhookOutboxTable {
  id: Generated<string>
  message_id: Generated<string>
  endpoint_id: string
  organization_id: string
  event_type: string
  payload: string
  created_at: Timestamp
  next_attempt_at: Timestamp
  lease_until: Timestamp | null
  attempts: Generated<number>
  delivered_at: Timestamp | null
  failed_at: Timestamp | null
  last_error: string | null
}

export type AttemptOutcome = 'delivered' | 'retrying' | 'dead_letter' | 'endpoint_disabled'

export interface WebhookAttemptTable {
  id: Generated<string>
  endpoint_id: string
  organization_id: string
  message_id: string
  event_type: string
  attempt: number
  attempted_at: Timestamp
  status_code: number | null
  duration_ms: number
  error: string | null
  outcome: AttemptOutcome
}

declare module '../../db/schema.ts' {
  interface Database {
    webhook_endpoints: WebhookEndpointTable
    webhook_outbox: WebhookOutboxTable
    webhook_attempts: WebhookAttemptTable
  }
}
