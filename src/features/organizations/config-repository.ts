import type { Selectable } from 'kysely'
import type { OrganizationConfigTable, Tx } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'

// Per-organization configuration entries. Every statement names the tenant's organization. The
// functions take a transaction: each configuration operation runs in one.

export type OrganizationConfigRow = Selectable<OrganizationConfigTable>

/** An organization's entries, by key. */
export function listConfigEntries(trx: Tx, tenant: TenantScope): Promise<OrganizationConfigRow[]> {
  return trx
    .selectFrom('organization_config')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .orderBy('key')
    .execute()
}

/** Inserts the entry or replaces its value. */
export function upsertConfigEntry(
  trx: Tx,
  tenant: TenantScope,
  values: { key: string; value: string; now: Date },
): Promise<OrganizationConfigRow> {
  return trx
    .insertInto('organization_config')
    .values({
      organization_id: tenant.organizationId,
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
export async function deleteConfigEntry(trx: Tx, tenant: TenantScope, key: string): Promise<boolean> {
  const deleted = await trx
    .deleteFrom('organization_config')
    .where('organization_id', '=', tenant.organizationId)
    .where('key', '=', key)
    .returning('key')
    .executeTakeFirst()
  return deleted !== undefined
}
