// The audit trail (an infrastructure room): events recorded in the transaction that causes them,
// hash-chained per organization (src/audit/chain.ts), verified by `npm run cli -- audit verify`.
export { ChainKeys, type StoredEvent, type Verification } from './chain.ts'
export { deleteOldEvents } from './repository.ts'
export {
  type AuditActor,
  type AuditEventInput,
  AuditTrail,
  type AuditValue,
  actorOf,
  SYSTEM_CHAIN,
  verifyStoredChain,
} from './trail.ts'
