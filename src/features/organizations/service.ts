import type { Kysely } from 'kysely'
import type { Database } from '../../db/schema.ts'
import { AppError } from '../../errors.ts'
import { insertOrganization, type OrganizationRow } from './repository.ts'

export const ORGANIZATION_NAME_MAX = 200

export async function createOrganization(
  db: Kysely<Database>,
  input: { name: string },
): Promise<OrganizationRow> {
  const name = input.name.trim()
  if (name.length === 0 || name.length > ORGANIZATION_NAME_MAX) {
    throw new AppError(
      'VALIDATION_FAILED',
      `Organization name must be 1 to ${ORGANIZATION_NAME_MAX} characters`,
      {
        extensions: {
          errors: [{ path: 'name', message: `must be 1 to ${ORGANIZATION_NAME_MAX} characters` }],
        },
      },
    )
  }
  return insertOrganization(db, { name })
}
