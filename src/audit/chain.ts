import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import { deriveKey } from '../security/secret-box.ts'

// The audit trail's tamper evidence: per chain (an organization, or `system`), every event is
// numbered and hashed as HMAC-SHA256(key, previous hash ‖ canonical event). The key is a secret of
// the deployment, never stored: whoever can write the database cannot recompute a hash after
// editing, deleting or reordering a row. Verification walks a chain in sequence order and names the
// first event that does not follow from the one before it.

/** The hash a chain's first event is chained to. */
export const GENESIS_HASH = '0'.repeat(64)

export type ActorType = 'user' | 'api_key' | 'service_account' | 'system'

/** What an event's hash covers: every column but the hashes and the key id. */
export interface ChainedEvent {
  id: string
  chain: string
  sequence: number
  organizationId: string | null
  occurredAt: Date
  type: string
  actorType: ActorType
  actorId: string | null
  subjectType: string | null
  subjectId: string | null
  ipAddress: string | null
  userAgent: string | null
  requestId: string | null
  data: Record<string, unknown>
}

/** JSON with the keys of every object sorted, so one event has exactly one text. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`
}

/** The event's text as hashed: exactly the fields of ChainedEvent, whatever else the object holds. */
function canonicalEvent(event: ChainedEvent): string {
  return canonicalJson({
    id: event.id,
    chain: event.chain,
    sequence: event.sequence,
    organizationId: event.organizationId,
    occurredAt: event.occurredAt.toISOString(),
    type: event.type,
    actorType: event.actorType,
    actorId: event.actorId,
    subjectType: event.subjectType,
    subjectId: event.subjectId,
    ipAddress: event.ipAddress,
    userAgent: event.userAgent,
    requestId: event.requestId,
    data: event.data,
  })
}

export function chainHash(key: Buffer, previousHash: string, event: ChainedEvent): string {
  return createHmac('sha256', key)
    .update(previousHash)
    .update('\n')
    .update(canonicalEvent(event))
    .digest('hex')
}

/** The chain keys of the deployment: the current one hashes, earlier ones still verify. */
export class ChainKeys {
  readonly #byId: Map<string, Buffer>
  readonly currentId: string
  readonly current: Buffer

  constructor(current: Buffer, previous: Buffer[] = []) {
    this.current = current
    this.currentId = chainKeyId(current)
    this.#byId = new Map([current, ...previous].map((key) => [chainKeyId(key), key]))
  }

  byId(id: string): Buffer | undefined {
    return this.#byId.get(id)
  }

  /** Keys derived from secrets (the chain key, or the JWT secrets when none is configured). */
  static derivedFrom(secrets: Buffer[]): ChainKeys {
    const [first, ...rest] = secrets.map((secret) => deriveKey(secret, 'audit-chain'))
    if (!first) throw new Error('no audit chain key')
    return new ChainKeys(first, rest)
  }
}

/** A key's public name, stored with each event it hashed. */
function chainKeyId(key: Buffer): string {
  return createHash('sha256').update('platform-core-audit-kid').update(key).digest('base64url').slice(0, 16)
}

export interface StoredEvent extends ChainedEvent {
  keyId: string
  previousHash: string
  hash: string
}

export type Verification =
  | { ok: true; events: number; head: { sequence: number; hash: string } | null }
  | { ok: false; sequence: number; reason: string }

const sameHash = (a: string, b: string) => {
  const x = Buffer.from(a, 'hex')
  const y = Buffer.from(b, 'hex')
  return x.length === 32 && y.length === 32 && timingSafeEqual(x, y)
}

/**
 * Checks the events of one chain, fed in sequence order from wherever retention left the chain:
 * numbers without gaps, each chained to the hash of the one before, each hash recomputed under its
 * key. The first event is trusted to start where its `previousHash` says (the events before it may
 * have been removed by retention), unless it is the chain's first, which must start at the genesis.
 * Feeding in batches keeps memory bounded however long the chain.
 */
export class ChainVerifier {
  readonly #keys: ChainKeys
  #previous: StoredEvent | undefined
  #count = 0
  #failure: Verification | undefined

  constructor(keys: ChainKeys) {
    this.#keys = keys
  }

  /** Checks the next event; false once the chain is broken (the failure names where). */
  check(event: StoredEvent): boolean {
    if (this.#failure) return false
    const failure = this.#failureAt(event)
    if (failure) {
      this.#failure = failure
      return false
    }
    this.#count++
    this.#previous = event
    return true
  }

  #failureAt(event: StoredEvent): Verification | undefined {
    const previous = this.#previous
    if (previous) {
      if (event.sequence !== previous.sequence + 1)
        return { ok: false, sequence: previous.sequence + 1, reason: 'missing: the sequence jumps here' }
      if (event.previousHash !== previous.hash)
        return { ok: false, sequence: event.sequence, reason: 'not chained to the event before it' }
    } else if (event.sequence === 1 && event.previousHash !== GENESIS_HASH) {
      return { ok: false, sequence: 1, reason: 'the first event is not chained to the start' }
    }
    const key = this.#keys.byId(event.keyId)
    if (!key)
      return { ok: false, sequence: event.sequence, reason: `hashed with an unknown key ${event.keyId}` }
    if (!sameHash(chainHash(key, event.previousHash, event), event.hash))
      return { ok: false, sequence: event.sequence, reason: 'its hash does not match its content' }
    return undefined
  }

  get result(): Verification {
    if (this.#failure) return this.#failure
    const head = this.#previous ? { sequence: this.#previous.sequence, hash: this.#previous.hash } : null
    return { ok: true, events: this.#count, head }
  }
}
