import { randomUUID } from 'node:crypto'
import type { RawBuilder } from 'kysely'
import type { Clock } from '../clock.ts'
import { currentRequestOrigin } from '../context.ts'
import { afterCommit } from '../db/after-commit.ts'
import type { Executor, Tx } from '../db/schema.ts'
import type { Principal } from '../principal.ts'
import {
  type ActorType,
  type ChainKeys,
  ChainVerifier,
  type StoredEvent,
  type Verification,
} from './chain.ts'
import type { AuditEventType } from './event-types.ts'
import {
  chainEvents,
  countUnchained,
  eventInsertion,
  type LinkedEvent,
  lockChainHeads,
  type UnchainedEvent,
} from './repository.ts'

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

/** What is told, once a transaction that recorded events of a chain has committed (the chainer). */
export interface ChainNudge {
  nudge(chain: string): void
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
 * What else chained events write in the statement that chains them (webhook messages): a
 * data-modifying statement run as one more part of that statement, or null for nothing.
 */
export type AuditFanOut = (events: LinkedEvent[]) => RawBuilder<unknown> | null

/**
 * Records audit events in the caller's transaction, so an event exists exactly when the change it
 * reports committed. The client address, user agent and request id come from the request the
 * transaction runs for (src/context.ts); outside a request they are null. The event is written
 * without its place in its organization's chain, so writes of one organization do not wait for each
 * other: once the transaction commits the chainer is nudged, and it links and hashes the chain's
 * committed events in order (src/audit/chainer.ts).
 */
export class AuditTrail {
  readonly #keys: ChainKeys
  readonly #clock: Clock
  readonly #chainer: ChainNudge | undefined

  constructor(keys: ChainKeys, clock: Clock, chainer?: ChainNudge) {
    this.#keys = keys
    this.#clock = clock
    this.#chainer = chainer
  }

  get keys(): ChainKeys {
    return this.#keys
  }

  /**
   * Holds the organization's chain until `trx` ends: no chainer chains its events meanwhile, and
   * what a chainer does next reads what `trx` committed. For a change that decides which of the
   * events written from now on something receives (a webhook endpoint noting the position it starts
   * after): an event written after the change could otherwise be chained, and fanned out, before the
   * change commits, and so miss it.
   */
  async holdChain(trx: Tx, organizationId: string): Promise<void> {
    await lockChainHeads(trx, [chainOf(organizationId)])
  }

  async record(trx: Tx, input: AuditEventInput): Promise<void> {
    await this.insertion(trx, input).execute(trx)
  }

  /**
   * `record`'s insert as a part of a caller's own statement (a data-modifying CTE), so the event
   * costs no round trip of its own; with `onlyIf`, written only when that condition of the
   * caller's statement holds. It must run in `trx`.
   */
  insertion(trx: Tx, input: AuditEventInput, onlyIf: RawBuilder<unknown> | null = null): RawBuilder<unknown> {
    const event = this.#event(input)
    const chainer = this.#chainer
    if (chainer) afterCommit(trx, () => chainer.nudge(event.chain))
    return eventInsertion(event, onlyIf)
  }

  #event(input: AuditEventInput): UnchainedEvent {
    const origin = currentRequestOrigin()
    // While an admin impersonates a user, what the user's session does is the admin's doing on the
    // user's behalf: the admin is the actor and `data.onBehalfOf` names the user.
    const acting = origin?.impersonation
    const actor =
      acting && input.actor.type === 'user' && input.actor.id === acting.userId
        ? { type: 'user' as const, id: acting.impersonatorId }
        : input.actor
    const data = acting ? { ...input.data, onBehalfOf: acting.userId } : (input.data ?? {})
    return {
      id: randomUUID(),
      chain: chainOf(input.organizationId),
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
  }
}

const VERIFY_BATCH = 1000

/** A chain's verification: its chained events checked, and how many wait to be chained. */
export type ChainReport = Verification & { unchained: number }

/**
 * Verifies a chain from the database, a batch at a time (`audit verify`): the chained events from
 * the first retention kept, and the count of events written but not chained yet (the tail the
 * chainer has still to link; they are not covered until it has).
 */
export async function verifyStoredChain(db: Executor, keys: ChainKeys, chain: string): Promise<ChainReport> {
  const verifier = new ChainVerifier(keys)
  let after = 0
  for (;;) {
    const batch = await chainEvents(db, chain, after, VERIFY_BATCH)
    let broken = false
    for (const event of batch)
      if (!verifier.check(event)) {
        broken = true
        break
      }
    if (broken || batch.length < VERIFY_BATCH)
      return { ...verifier.result, unchained: await countUnchained(db, chain) }
    after = (batch.at(-1) as StoredEvent).sequence
  }
}
