import { sql } from 'kysely'
import type { Executor } from '../db/schema.ts'

/** Counts one hit in the key's fixed window, atomically across instances; returns the new count. */
export async function hitRateLimit(db: Executor, key: string, windowStart: Date): Promise<number> {
  const row = await db
    .insertInto('rate_limits')
    .values({ key, window_start: windowStart, count: 1 })
    .onConflict((oc) =>
      oc.column('key').doUpdateSet({
        count: sql`case when rate_limits.window_start = excluded.window_start then rate_limits.count + 1 else 1 end`,
        window_start: sql`excluded.window_start`,
      }),
    )
    .returning('count')
    .executeTakeFirstOrThrow()
  return row.count
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
