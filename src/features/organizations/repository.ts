import type { Selectable } from 'kysely'
import type { Executor, OrganizationTable } from '../../db/schema.ts'

export type OrganizationRow = Selectable<OrganizationTable>

export function insertOrganization(db: Executor, values: { name: string }): Promise<OrganizationRow> {
  return db.insertInto('organizations').values(values).returningAll().executeTakeFirstOrThrow()
}

export function findOrganization(db: Executor, id: string): Promise<OrganizationRow | undefined> {
  return db.selectFrom('organizations').selectAll().where('id', '=', id).executeTakeFirst()
}

export function listOrganizations(db: Executor): Promise<OrganizationRow[]> {
  return db.selectFrom('organizations').selectAll().orderBy('name').orderBy('id').execute()
}
