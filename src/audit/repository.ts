import { type RawBuilder, type Selectable, sql } from 'kysely'
import type { AuditEventTable, Executor, Tx } from '../db/schema.ts'
import { GENESIS_HASH, type StoredEvent } from './chain.ts'

/** A chain's head as the statement that locks it returns it (int8 as text). */
export type ChainHeadRow = {
  sequence: string
  hash: string
}

/**
 * The statement that locks a chain's head for the rest of the transaction and returns it (a new
 * chain starts at 0 and the genesis hash): whoever comes second waits for the first to commit. Run
 * alone (lockChainHead) or as a data-modifying part of a caller's statement, so that the lock costs
 * no round trip of its own.
 */
export function chainHeadLock(chain: string): RawBuilder<ChainHeadRow> {
  return sql<ChainHeadRow>`
    insert into audit_chain_heads (chain, sequence, hash) values (${chain}, 0, ${GENESIS_HASH})
    on conflict (chain) do update set chain = excluded.chain
    returning sequence, hash`
}

/** Locks a chain's head for the rest of the transaction and returns it, in one statement. */
export async function lockChainHead(trx: Tx, chain: string): Promise<{ sequence: number; hash: string }> {
  const { rows } = await chainHeadLock(chain).execute(trx)
  const head = rows[0] as ChainHeadRow
  return { sequence: Number(head.sequence), hash: head.hash }
}

/**
 * Appends an event and moves its chain's head to it, in one statement, with `alongside` (a
 * data-modifying statement of the caller's, such as queueing webhook messages) as one more part.
 */
export async function appendEvent(
  trx: Tx,
  event: StoredEvent,
  alongside: RawBuilder<unknown> | null = null,
): Promise<void> {
  await sql`
    with appended as (
      insert into audit_events (id, chain, sequence, organization_id, occurred_at, type, actor_type,
        actor_id, subject_type, subject_id, ip_address, user_agent, request_id, data, key_id,
        previous_hash, hash)
      values (${event.id}, ${event.chain}, ${event.sequence}, ${event.organizationId}, ${event.occurredAt},
        ${event.type}, ${event.actorType}, ${event.actorId}, ${event.subjectType}, ${event.subjectId},
        ${event.ipAddress}, ${event.userAgent}, ${event.requestId}, ${JSON.stringify(event.data)}::jsonb,
        ${event.keyId}, ${event.previousHash}, ${event.hash})
    )${alongside ? sql`, alongside as (${alongside})` : sql``}
    update audit_chain_heads set sequence = ${event.sequence}, hash = ${event.hash}
    where chain = ${event.chain}`.execute(trx)
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

export function toStoredEvent(row: Selectable<AuditEventTable>): StoredEvent {
  return {
    id: row.id,
    chain: row.chain,
    sequence: Number(row.sequence),
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
        where old.occurred_at < ${cutoff}
          and not exists (
            select 1 from audit_events kept
            where kept.chain = old.chain and kept.sequence < old.sequence and kept.occurred_at >= ${cutoff}
          )
        limit ${limit}
      ) returning 1
    ) select count(*) as count from gone`.execute(db)
  return Number(rows[0]?.count ?? 0)
}
