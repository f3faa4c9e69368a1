import type { Selectable } from 'kysely'
import type { OrganizationConfigTable, Tx } from '../../db/schema.ts'

// Per-organization configuration entries. Every query names the organization. The functions take
// a transaction: spec 4.4 runs each configuration operation in one.

export type OrganizationConfigRow = Selectable<OrganizationConfigTable>

/** An organization's entries, by key. */
export function listConfigEntries(trx: Tx, organizationId: string): Promise<OrganizationConfigRow[]> {
  return trx
    .selectFrom('organization_config')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .orderBy('key')
    .execute()
}

/** Inserts the entry or replaces its value. */
export function upsertConfigEntry(
  trx: Tx,
  values: { organizationId: string; key: string; value: string; now: Date },
): Promise<OrganizationConfigRow> {
  return trx
    .insertInto('organization_config')
    .values({
      organization_id: values.organizationId,
      key: values.key,
      value: values.value,
      updated_at: values.now,
    })
    .onConflict((oc) =>
      oc.columns(['organization_id', 'key']).doUpdateSet((eb) => ({
        value: eb.ref('excluded.value'),
        updated_at: eb.ref('excluded.updated_at'),
      })),
    )
    .returningAll()
    .executeTakeFirstOrThrow()
}

/** Removes the entry; false when there was none. */
export async function deleteConfigEntry(trx: Tx, organizationId: string, key: string): Promise<boolean> {
  const deleted = await trx
    .deleteFrom('organization_config')
    .where('organization_id', '=', organizationId)
    .where('key', '=', key)
    .returning('key')
    .executeTakeFirst()
  return deleted !== undefined
}
