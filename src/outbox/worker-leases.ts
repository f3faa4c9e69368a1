import { sql } from 'kysely'
import type { Executor } from '../db/schema.ts'

// Named leases (worker_leases): work that one instance at a time does takes the lease for a while
// and renews it; a holder that dies loses it when it runs out.

/** Takes or renews the lease `name` for `holder` until `until`; false while another holds it. */
export async function acquireLease(db: Executor, name: string, holder: string, now: Date, until: Date) {
  const row = await db
    .insertInto('worker_leases')
    .values({ name, holder, lease_until: until })
    .onConflict((oc) =>
      oc
        .column('name')
        .doUpdateSet({ holder, lease_until: until })
        .where((eb) =>
          eb.or([eb('worker_leases.lease_until', '<', now), eb('worker_leases.holder', '=', holder)]),
        ),
    )
    .returning('name')
    .executeTakeFirst()
  return row !== undefined
}

/** Gives the lease up if `holder` has it. */
export async function releaseLease(db: Executor, name: string, holder: string): Promise<void> {
  await db
    .updateTable('worker_leases')
    .set({ lease_until: sql<Date>`'epoch'` })
    .where('name', '=', name)
    .where('holder', '=', holder)
    .execute()
}
