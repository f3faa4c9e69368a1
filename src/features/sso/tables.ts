import type { Generated } from 'kysely'
import type { Timestamp } from '../../db/schema.ts'

// The feature's tables (migration 0029), added to the `Database` interface from here. Every row
// carries its organization.

export interface SsoConnectionTable {
  id: Generated<string>
  organization_id: string
  name: Generated<string>
  issuer: string
  client_id: string
  /** Sealed with the SSO secret box; never readable at rest, never answered. */
  client_secret: string
  enabled: Generated<boolean>
  created_at: Timestamp
  updated_at: Timestamp
}

export interface SsoDomainTable {
  organization_id: string
  /** Lower-case, without a trailing dot. */
  domain: string
  /** The value the TXT record `_platform-verification.<domain>` must hold. */
  challenge: string
  verified_at: Timestamp | null
  /** The last lookup of the TXT record. */
  checked_at: Timestamp | null
  created_at: Timestamp
}

declare module '../../db/schema.ts' {
  interface Database {
    sso_connections: SsoConnectionTable
    sso_domains: SsoDomainTable
  }
}
