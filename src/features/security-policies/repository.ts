import type { Executor } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'

export interface SecurityEntry {
  organization_id: string
  key: string
  value: string
  updated_at: Date
}

/** Every organization's `security.*` configuration entries. */
export function listAllSecurityEntries(db: Executor): Promise<SecurityEntry[]> {
  return db
    .selectFrom('organization_config')
    .select(['organization_id', 'key', 'value', 'updated_at'])
    .where('key', 'like', 'security.%')
    .execute()
}

/** An organization's `security.*` configuration entries. */
export function listSecurityEntries(db: Executor, tenant: TenantScope): Promise<SecurityEntry[]> {
  return db
    .selectFrom('organization_config')
    .select(['organization_id', 'key', 'value', 'updated_at'])
    .where('organization_id', '=', tenant.organizationId)
    .where('key', 'like', 'security.%')
    .execute()
}

/** Whether the account has a TOTP enabled or a passkey. */
export async function hasSecondFactor(db: Executor, userId: string): Promise<boolean> {
  const row = await db
    .selectFrom('accounts')
    .select((eb) => [
      'accounts.otp_enabled',
      eb
        .exists(
          eb.selectFrom('passkeys').select('passkeys.id').whereRef('passkeys.account_id', '=', 'accounts.id'),
        )
        .as('has_passkey'),
    ])
    .where('accounts.id', '=', userId)
    .executeTakeFirst()
  return row !== undefined && (row.otp_enabled || Boolean(row.has_passkey))
}
