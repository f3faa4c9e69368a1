import { type RawBuilder, type Selectable, sql } from 'kysely'
import type { AuditEventTable, Executor, Tx } from '../db/schema.ts'
import { GENESIS_HASH, type StoredEvent } from './chain.ts'

/** A chain's head: its last event's sequence and hash (0 and the genesis hash before its first). */
export interface ChainHead {
  chain: string
  sequence: number
  hash: string
}

/**
 * Locks the heads of `chains` for the rest of the transaction and returns them, creating a new
 * chain's head at 0 and the genesis hash, in one statement. The rows are locked in the order of
 * their names, so two chainers locking overlapping sets wait for each other instead of deadlocking.
 */
export async function lockChainHeads(trx: Tx, chains: string[]): Promise<Map<string, ChainHead>> {
  const names = JSON.stringify([...new Set(chains)].sort())
  const { rows } = await sql<{ chain: string; sequence: string; hash: string }>`
    insert into audit_chain_heads (chain, sequence, hash)
    select name, 0, ${GENESIS_HASH} from jsonb_array_elements_text(${names}::jsonb) as name order by name
    on conflict (chain) do update set chain = excluded.chain
    returning chain, sequence, hash`.execute(trx)
  return new Map(
    rows.map((row) => [row.chain, { chain: row.chain, sequence: Number(row.sequence), hash: row.hash }]),
  )
}

/** An event as the causing transaction writes it: everything but its place in the chain. */
export type UnchainedEvent = Omit<StoredEvent, 'sequence' | 'keyId' | 'previousHash' | 'hash'>

/** An unchained event as the chainer reads it: with the position it was written at (int8 as text). */
export type WrittenEvent = UnchainedEvent & { position: string }

/** An event the chainer has just given its place, with the position it was written at. */
export type LinkedEvent = StoredEvent & { position: string }

/**
 * The insert of an event without its place in its chain (the chainer gives it one once committed),
 * run alone or as a data-modifying part of a caller's statement; with `onlyIf`, only when that
 * condition of the caller's statement holds.
 */
export function eventInsertion(
  event: UnchainedEvent,
  onlyIf: RawBuilder<unknown> | null = null,
): RawBuilder<unknown> {
  return sql`
    insert into audit_events (id, chain, organization_id, occurred_at, type, actor_type, actor_id,
      subject_type, subject_id, ip_address, user_agent, request_id, data)
    select ${event.id}::uuid, ${event.chain}, ${event.organizationId}::uuid, ${event.occurredAt}::timestamptz,
      ${event.type}, ${event.actorType}, ${event.actorId}, ${event.subjectType}, ${event.subjectId},
      ${event.ipAddress}, ${event.userAgent}, ${event.requestId}, ${JSON.stringify(event.data)}::jsonb
    ${onlyIf ? sql`where ${onlyIf}` : sql``}`
}

/**
 * The unchained events of `chains`, chain by chain in the order they were written, at most
 * `limitPerChain` of each.
 */
export async function unchainedEvents(
  trx: Tx,
  chains: string[],
  limitPerChain: number,
): Promise<WrittenEvent[]> {
  const { rows } = await sql<Selectable<AuditEventTable>>`
    select * from (
      select e.*, row_number() over (partition by e.chain order by e.position) as nth
      from audit_events e
      where e.sequence is null and e.chain in (select jsonb_array_elements_text(${JSON.stringify(chains)}::jsonb))
    ) unchained
    where nth <= ${limitPerChain}
    order by chain, position`.execute(trx)
  return rows.map((row) => ({ ...eventOf(row), position: row.position as string }))
}

/** What a row says of its event, whether chained or not. */
function eventOf(row: Selectable<AuditEventTable>): UnchainedEvent {
  return {
    id: row.id,
    chain: row.chain,
    organizationId: row.organization_id,
    occurredAt: row.occurred_at,
    type: row.type,
    actorType: row.actor_type,
    actorId: row.actor_id,
    subjectType: row.subject_type,
    subjectId: row.subject_id,
    ipAddress: row.ip_address,
    userAgent: row.user_agent,
    requestId: row.request_id,
    data: row.data as Record<string, unknown>,
  }
}

/**
 * Gives events their places (sequence, key, hashes) and moves their chains' heads to `heads`, in one
 * statement, with `alongside` (a data-modifying statement of the caller's, such as queueing webhook
 * messages) as one more part. Returns how many events it linked: under the heads' locks that is all
 * of them, and fewer means something else linked one (a bug): the caller rolls back.
 */
export async function linkEvents(
  trx: Tx,
  events: StoredEvent[],
  heads: ChainHead[],
  alongside: RawBuilder<unknown> | null = null,
): Promise<number> {
  if (events.length === 0) return 0
  const places = JSON.stringify(
    events.map((e) => ({
      id: e.id,
      chain: e.chain,
      sequence: e.sequence,
      key_id: e.keyId,
      previous_hash: e.previousHash,
      hash: e.hash,
    })),
  )
  const { rows } = await sql<{ linked: string }>`
    with linked as (
      update audit_events e
      set sequence = v.sequence, key_id = v.key_id, previous_hash = v.previous_hash, hash = v.hash
      from jsonb_to_recordset(${places}::jsonb)
        as v(id uuid, chain text, sequence bigint, key_id text, previous_hash text, hash text)
      where e.id = v.id and e.chain = v.chain and e.sequence is null
      returning 1
    ), moved as (
      update audit_chain_heads h set sequence = v.sequence, hash = v.hash
      from jsonb_to_recordset(${JSON.stringify(heads)}::jsonb) as v(chain text, sequence bigint, hash text)
      where h.chain = v.chain
      returning 1
    )${alongside ? sql`, alongside as (${alongside})` : sql``}
    select (select count(*) from linked) as linked`.execute(trx)
  return Number(rows[0]?.linked ?? 0)
}

/** Chains that hold events not chained yet (at most `limit`). */
export async function chainsWithUnchained(db: Executor, limit: number): Promise<string[]> {
  const { rows } = await sql<{ chain: string }>`
    select distinct chain from audit_events where sequence is null limit ${limit}`.execute(db)
  return rows.map((row) => row.chain)
}

/** Whether a chain holds an event not chained yet (one probe of the partial index). */
export async function hasUnchained(db: Executor, chain: string): Promise<boolean> {
  const { rows } = await sql<{ found: boolean }>`
    select exists (select 1 from audit_events where chain = ${chain} and sequence is null) as found`.execute(
    db,
  )
  return rows[0]?.found === true
}

/** How many of a chain's events are not chained yet. */
export async function countUnchained(db: Executor, chain: string): Promise<number> {
  const { rows } = await sql<{ count: string }>`
    select count(*) as count from audit_events where chain = ${chain} and sequence is null`.execute(db)
  return Number(rows[0]?.count ?? 0)
}

/** A chain's events in sequence order, a batch at a time after `afterSequence`. */
export async function chainEvents(
  db: Executor,
  chain: string,
  afterSequence: number,
  limit: number,
): Promise<StoredEvent[]> {
  const rows = await db
    .selectFrom('audit_events')
    .selectAll()
    .where('chain', '=', chain)
    .where('sequence', '>', String(afterSequence) as never)
    .orderBy('sequence')
    .limit(limit)
    .execute()
  return rows.map(toStoredEvent)
}

/** A chained event's row as the chain sees it (an unchained row has no place yet: an error). */
export function toStoredEvent(row: Selectable<AuditEventTable>): StoredEvent {
  if (row.sequence === null || row.key_id === null || row.previous_hash === null || row.hash === null)
    throw new Error(`audit event ${row.id} is not chained yet`)
  return {
    ...eventOf(row),
    sequence: Number(row.sequence),
    keyId: row.key_id,
    previousHash: row.previous_hash,
    hash: row.hash,
  }
}

/**
 * Removes events older than `cutoff` from the start of each chain only: an event goes when no
 * earlier event of its chain is newer than the cutoff, so what remains is an unbroken tail that
 * still verifies from its first event.
 */
export async function deleteOldEvents(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const { rows } = await sql<{ count: string }>`
    with gone as (
      delete from audit_events where id in (
        select old.id from audit_events old
        where old.occurred_at < ${cutoff} and old.sequence is not null
          and not exists (
            select 1 from audit_events kept
            where kept.chain = old.chain and kept.sequence < old.sequence and kept.occurred_at >= ${cutoff}
          )
        limit ${limit}
      ) returning 1
    ) select count(*) as count from gone`.execute(db)
  return Number(rows[0]?.count ?? 0)
}
