// The audit trail (an infrastructure room): events recorded in the transaction that causes them,
// hash-chained per organization (src/audit/chain.ts), verified by `npm run cli -- audit verify`.
export { ChainKeys, type StoredEvent, type Verification } from './chain.ts'
export { AUDIT_EVENT_TYPES, type AuditEventType } from './event-types.ts'
export { type ChainHeadRow, toStoredEvent } from './repository.ts'
export { auditEventRetention } from './retention.ts'
export {
  type AuditActor,
  type AuditEventInput,
  type AuditFanOut,
  AuditTrail,
  type AuditValue,
  actorOf,
  type LockedHead,
  publicEvent,
  SYSTEM_CHAIN,
  verifyStoredChain,
} from './trail.ts'
