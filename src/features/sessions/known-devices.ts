import { sql } from 'kysely'
import type { Executor } from '../../db/schema.ts'

// The devices an account has signed in from, for the new-device notice: a device is the SHA-256 of the
// User-Agent string as the browser sends it.

/** Records a device; true when it had not been seen before for this account. */
export async function recordDevice(
  db: Executor,
  accountId: string,
  deviceHash: string,
  now: Date,
): Promise<boolean> {
  const row = await db
    .insertInto('known_devices')
    .values({ account_id: accountId, device_hash: deviceHash, first_seen_at: now, last_seen_at: now })
    .onConflict((oc) => oc.columns(['account_id', 'device_hash']).doUpdateSet({ last_seen_at: now }))
    .returning(sql<boolean>`(xmax = 0)`.as('inserted'))
    .executeTakeFirstOrThrow()
  return row.inserted
}

export async function countDevices(db: Executor, accountId: string): Promise<number> {
  const row = await db
    .selectFrom('known_devices')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow()
  return Number(row.n)
}
