import type { Kysely } from 'kysely'
import type { Database } from '../../db/schema.ts'
import { validationFailed } from '../../errors.ts'
import { insertOrganization, type OrganizationRow } from './repository.ts'

export const ORGANIZATION_NAME_MAX = 200

export async function createOrganization(
  db: Kysely<Database>,
  input: { name: string },
): Promise<OrganizationRow> {
  const name = input.name.trim()
  if (name.length === 0 || name.length > ORGANIZATION_NAME_MAX) {
    throw validationFailed(
      'name',
      `must be 1 to ${ORGANIZATION_NAME_MAX} characters`,
      `Organization name must be 1 to ${ORGANIZATION_NAME_MAX} characters`,
    )
  }
  return insertOrganization(db, { name })
}
