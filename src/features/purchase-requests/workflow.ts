// The purchase-request state machine, declared once as data. Every move is validated
// against it; nothing else in the code knows which transitions exist.

import type { PurchaseRequestStatus } from './tables.ts'

export type { PurchaseRequestStatus }
export const PurchaseRequestStatuses = [
  'DRAFT',
  'SUBMITTED',
  'APPROVED',
] as const satisfies readonly PurchaseRequestStatus[]

export const INITIAL_STATUS: PurchaseRequestStatus = 'DRAFT'

export const WORKFLOW = {
  submit: { from: 'DRAFT', to: 'SUBMITTED' },
  approve: { from: 'SUBMITTED', to: 'APPROVED' },
} as const satisfies Record<string, { from: PurchaseRequestStatus; to: PurchaseRequestStatus }>

export type PurchaseRequestAction = keyof typeof WORKFLOW

/** The status an action leads to from `status`, or null when the workflow does not allow it. */
export function nextStatus(
  status: PurchaseRequestStatus,
  action: PurchaseRequestAction,
): PurchaseRequestStatus | null {
  const move = WORKFLOW[action]
  return move.from === status ? move.to : null
}
