import { randomUUID } from 'node:crypto'
import type { RawBuilder } from 'kysely'
import type { Clock } from '../clock.ts'
import { currentRequestOrigin } from '../context.ts'
import type { Executor, Tx } from '../db/schema.ts'
import type { Principal } from '../principal.ts'
import {
  type ActorType,
  type ChainKeys,
  ChainVerifier,
  chainHash,
  type StoredEvent,
  type Verification,
} from './chain.ts'
import type { AuditEventType } from './event-types.ts'
import { appendEvent, type ChainHeadRow, chainEvents, chainHeadLock, lockChainHead } from './repository.ts'

/** The chain of events that belong to no organization. */
export const SYSTEM_CHAIN = 'system'

const USER_AGENT_MAX = 512

/** Values an event's `data` may hold: small and typed, never a secret, token or hash. */
export type AuditValue = string | number | boolean | null

export interface AuditActor {
  type: ActorType
  id: string | null
}

export interface AuditEventInput {
  /** One of AUDIT_EVENT_TYPES, or a type of a deployment's own feature (lower-case dotted words). */
  type: AuditEventType | (string & {})
  /** null: the system chain (a sign-in of an unknown account, a service account). */
  organizationId: string | null
  actor: AuditActor
  subject?: { type: string; id: string } | null
  data?: Record<string, AuditValue>
}

declare const locked: unique symbol

/**
 * A chain's head as read by the statement that locked it for the rest of its transaction
 * (AuditTrail.headLock, then lockedHead): what the next event of that chain is appended after.
 */
export interface LockedHead {
  readonly chain: string
  readonly sequence: number
  readonly hash: string
  readonly [locked]: true
}

/** The chain of an organization's events; the system chain for none. */
const chainOf = (organizationId: string | null) => organizationId ?? SYSTEM_CHAIN

/** Who acts: the request's principal, or the system (the CLI, workers, an anonymous caller). */
export function actorOf(principal: Principal | null | undefined): AuditActor {
  if (!principal) return { type: 'system', id: null }
  if (principal.type === 'USER') return { type: 'user', id: principal.impersonatorId ?? principal.userId }
  if (principal.type === 'API_KEY') return { type: 'api_key', id: principal.apiKeyId }
  return { type: 'service_account', id: principal.serviceAccountId }
}

/** An event as the API shows it (GET /api/audit-events, the export, webhook payloads). */
export function publicEvent(event: StoredEvent) {
  return {
    id: event.id,
    sequence: event.sequence,
    occurredAt: event.occurredAt.toISOString(),
    type: event.type,
    actor: { type: event.actorType, id: event.actorId },
    subject: event.subjectType && event.subjectId ? { type: event.subjectType, id: event.subjectId } : null,
    ipAddress: event.ipAddress,
    userAgent: event.userAgent,
    requestId: event.requestId,
    data: event.data as Record<string, AuditValue>,
    previousHash: event.previousHash,
    hash: event.hash,
  }
}

/**
 * What else an appended event writes in the statement that appends it (webhook messages): a
 * data-modifying statement run as one more part of that statement, or null for nothing.
 */
export type AuditFanOut = (event: StoredEvent) => RawBuilder<unknown> | null

/**
 * Records audit events in the caller's transaction, so an event exists exactly when the change it
 * reports committed. The client address, user agent and request id come from the request the
 * transaction runs for (src/context.ts); outside a request they are null. Each event is appended
 * to its organization's chain under that chain's row lock (src/audit/repository.ts).
 */
export class AuditTrail {
  readonly #keys: ChainKeys
  readonly #clock: Clock
  readonly #fanOut: AuditFanOut | undefined

  constructor(keys: ChainKeys, clock: Clock, fanOut?: AuditFanOut) {
    this.#keys = keys
    this.#clock = clock
    this.#fanOut = fanOut
  }

  get keys(): ChainKeys {
    return this.#keys
  }

  async record(trx: Tx, input: AuditEventInput): Promise<void> {
    const chain = chainOf(input.organizationId)
    await this.#append(trx, input, chain, await lockChainHead(trx, chain))
  }

  /**
   * The lock `record` takes on the head of the chain of an organization's events (null: the
   * system chain), as a part of a caller's own statement (a data-modifying CTE whose row the
   * statement returns): the caller's first write of a unit of work and the lock in one round trip.
   * The row goes to `lockedHead`, and the event to `recordLocked` in the same transaction.
   */
  headLock(organizationId: string | null): RawBuilder<ChainHeadRow> {
    return chainHeadLock(chainOf(organizationId))
  }

  /** The head a statement with `headLock(organizationId)` returned. */
  lockedHead(organizationId: string | null, row: ChainHeadRow): LockedHead {
    return { chain: chainOf(organizationId), sequence: Number(row.sequence), hash: row.hash } as LockedHead
  }

  /** `record`, for a transaction that already holds the lock of the event's chain head. */
  async recordLocked(trx: Tx, input: AuditEventInput, head: LockedHead): Promise<void> {
    const chain = chainOf(input.organizationId)
    if (head.chain !== chain) throw new Error(`the locked head is of chain ${head.chain}, not ${chain}`)
    await this.#append(trx, input, chain, head)
  }

  async #append(
    trx: Tx,
    input: AuditEventInput,
    chain: string,
    head: { sequence: number; hash: string },
  ): Promise<void> {
    const origin = currentRequestOrigin()
    // While an admin impersonates a user, what the user's session does is the admin's doing on the
    // user's behalf: the admin is the actor and `data.onBehalfOf` names the user.
    const acting = origin?.impersonation
    const actor =
      acting && input.actor.type === 'user' && input.actor.id === acting.userId
        ? { type: 'user' as const, id: acting.impersonatorId }
        : input.actor
    const data = acting ? { ...input.data, onBehalfOf: acting.userId } : (input.data ?? {})
    const event = {
      id: randomUUID(),
      chain,
      sequence: head.sequence + 1,
      organizationId: input.organizationId,
      occurredAt: this.#clock.now(),
      type: input.type,
      actorType: actor.type,
      actorId: actor.id,
      subjectType: input.subject?.type ?? null,
      subjectId: input.subject?.id ?? null,
      ipAddress: origin?.ipAddress ?? null,
      userAgent: origin?.userAgent?.slice(0, USER_AGENT_MAX) ?? null,
      requestId: origin?.requestId ?? null,
      data,
    }
    const stored: StoredEvent = {
      ...event,
      keyId: this.#keys.currentId,
      previousHash: head.hash,
      hash: chainHash(this.#keys.current, head.hash, event),
    }
    await appendEvent(trx, stored, this.#fanOut?.(stored) ?? null)
  }
}

const VERIFY_BATCH = 1000

/** Verifies a chain from the database, a batch at a time (`audit verify`). */
export async function verifyStoredChain(db: Executor, keys: ChainKeys, chain: string): Promise<Verification> {
  const verifier = new ChainVerifier(keys)
  let after = 0
  for (;;) {
    const batch = await chainEvents(db, chain, after, VERIFY_BATCH)
    for (const event of batch) if (!verifier.check(event)) return verifier.result
    if (batch.length < VERIFY_BATCH) return verifier.result
    after = (batch.at(-1) as StoredEvent).sequence
  }
}
