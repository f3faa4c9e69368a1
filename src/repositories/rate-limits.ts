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
