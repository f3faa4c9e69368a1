// The audit trail (an infrastructure room): events recorded in the transaction that causes them,
// hash-chained per organization off the request path (src/audit/chainer.ts, src/audit/chain.ts),
// verified by `npm run cli -- audit verify`.
export { ChainKeys, type StoredEvent, type Verification } from './chain.ts'
export { AuditChainer } from './chainer.ts'
export { AUDIT_EVENT_TYPES, type AuditEventType } from './event-types.ts'
export { type LinkedEvent, toStoredEvent } from './repository.ts'
export { auditEventRetention } from './retention.ts'
export {
  type AuditActor,
  type AuditEventInput,
  type AuditFanOut,
  AuditTrail,
  type AuditValue,
  actorOf,
  type ChainReport,
  publicEvent,
  SYSTEM_CHAIN,
  verifyStoredChain,
} from './trail.ts'
