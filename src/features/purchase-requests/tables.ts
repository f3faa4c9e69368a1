import type { Generated } from 'kysely'
import type { Timestamp } from '../../db/schema.ts'

// The feature's tables (migration 0010), added to the `Database` interface from here so that the
// feature folder holds everything it owns. Every row carries its organization.

/** The states of the purchase-request workflow (workflow.ts). */
export type PurchaseRequestStatus = 'DRAFT' | 'SUBMITTED' | 'APPROVED'

export interface PurchaseRequestTable {
  id: string
  organization_id: string
  created_by: string
  title: string
  status: PurchaseRequestStatus
  created_at: Timestamp
  updated_at: Timestamp
}

export interface PurchaseRequestEventTable {
  id: Generated<string>
  organization_id: string
  purchase_request_id: string
  action: string
  from_status: PurchaseRequestStatus
  to_status: PurchaseRequestStatus
  actor_id: string
  occurred_at: Timestamp
}

declare module '../../db/schema.ts' {
  interface Database {
    purchase_requests: PurchaseRequestTable
    purchase_request_events: PurchaseRequestEventTable
  }
}
