import { type RawBuilder, sql } from 'kysely'
import type { Executor } from '../db/schema.ts'
import type { StatementHits } from '../db/statement-limits.ts'

/** The upsert that counts one hit in the key's fixed window when `when` holds; returns the count. */
const countHit = (key: string, windowStart: Date, when: RawBuilder<boolean>) => sql<{ count: number }>`
  insert into rate_limits as r (key, window_start, count)
  select ${key}::text, ${windowStart}::timestamptz, 1 where ${when}
  on conflict (key) do update set
    count = case when r.window_start = excluded.window_start then r.count + 1 else 1 end,
    window_start = excluded.window_start
  returning count`

/** Counts one hit in the key's fixed window, atomically across instances; returns the new count. */
export async function hitRateLimit(db: Executor, key: string, windowStart: Date): Promise<number> {
  const { rows } = await countHit(key, windowStart, sql<boolean>`true`).execute(db)
  return (rows[0] as { count: number }).count
}

/** A hit to count inside another statement: the counter, its window and the allowance it is checked against. */
export interface StatementHit {
  key: string
  windowStart: Date
  max: number
}

const hitName = (index: number) => sql.raw(`rate_hit_${index}`)
const withinAllowance = (hits: readonly StatementHit[]) =>
  hits.length === 0
    ? sql<boolean>`true`
    : sql<boolean>`${sql.join(
        hits.map((hit, index) => sql`(select count from ${hitName(index)}) <= ${hit.max}`),
        sql` and `,
      )}`

/**
 * The hits of `hits` as CTEs of another statement (a handler's one statement counts its route's
 * limit and does its work, guarded by `within`, in one round trip). Each counts as `hitRateLimit`
 * does, and only when the ones before it stayed within their allowance, as `enforceRateLimits` stops
 * at the first exceeded one. The text depends only on how many hits there are, so it stays one
 * prepared statement.
 */
export function hitsInStatement(hits: readonly StatementHit[]): StatementHits {
  const ctes = hits.map(
    (hit, index) =>
      sql`${hitName(index)} as (${countHit(hit.key, hit.windowStart, withinAllowance(hits.slice(0, index)))}), `,
  )
  return {
    ctes: sql.join(ctes, sql``),
    within: withinAllowance(hits),
    counts:
      hits.length === 0
        ? sql`'{}'::int[]`
        : sql`array[${sql.join(hits.map((_hit, index) => sql`(select count from ${hitName(index)})`))}]::int[]`,
  }
}

/** Takes one hit back from the key's window, if that window is still the current one. */
export async function unhitRateLimit(db: Executor, key: string, windowStart: Date): Promise<void> {
  await db
    .updateTable('rate_limits')
    .set({ count: sql`count - 1` })
    .where('key', '=', key)
    .where('window_start', '=', windowStart)
    .where('count', '>', 0)
    .execute()
}

/** Deletes up to `limit` counters whose window started before `cutoff`; returns how many. */
export async function deleteRateLimitsBefore(db: Executor, cutoff: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('rate_limits')
    .where('key', 'in', (eb) =>
      eb.selectFrom('rate_limits').select('key').where('window_start', '<', cutoff).limit(limit),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
