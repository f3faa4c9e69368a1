import type { Selectable, Updateable } from 'kysely'
import type { Executor } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import type { SsoConnectionTable, SsoDomainTable } from './tables.ts'

// The SSO statements: connections and domains of the caller's organization, and the two lookups
// that cross organizations on purpose (which organization verified a domain, and its enabled
// connection), used to route an address and to refuse a domain verified elsewhere.

export type ConnectionRow = Selectable<SsoConnectionTable>
export type DomainRow = Selectable<SsoDomainTable>

export function insertConnection(
  db: Executor,
  tenant: TenantScope,
  values: {
    name: string
    issuer: string
    clientId: string
    clientSecret: string
    enabled: boolean
    now: Date
  },
): Promise<ConnectionRow> {
  return db
    .insertInto('sso_connections')
    .values({
      organization_id: tenant.organizationId,
      name: values.name,
      issuer: values.issuer,
      client_id: values.clientId,
      client_secret: values.clientSecret,
      enabled: values.enabled,
      created_at: values.now,
      updated_at: values.now,
    })
    .returningAll()
    .executeTakeFirstOrThrow()
}

export function listConnections(db: Executor, tenant: TenantScope): Promise<ConnectionRow[]> {
  return db
    .selectFrom('sso_connections')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .orderBy('created_at')
    .orderBy('id')
    .execute()
}

export function findConnection(
  db: Executor,
  tenant: TenantScope,
  id: string,
): Promise<ConnectionRow | undefined> {
  return db
    .selectFrom('sso_connections')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .executeTakeFirst()
}

/** A connection by id whatever its organization: the sign-in flow names its connection. */
export function findConnectionById(db: Executor, id: string): Promise<ConnectionRow | undefined> {
  return db.selectFrom('sso_connections').selectAll().where('id', '=', id).executeTakeFirst()
}

export function updateConnection(
  db: Executor,
  tenant: TenantScope,
  id: string,
  changes: Updateable<SsoConnectionTable>,
): Promise<ConnectionRow | undefined> {
  return db
    .updateTable('sso_connections')
    .set(changes)
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst()
}

export async function deleteConnection(db: Executor, tenant: TenantScope, id: string): Promise<boolean> {
  const deleted = await db
    .deleteFrom('sso_connections')
    .where('organization_id', '=', tenant.organizationId)
    .where('id', '=', id)
    .returning('id')
    .executeTakeFirst()
  return deleted !== undefined
}

export function insertDomain(
  db: Executor,
  tenant: TenantScope,
  values: { domain: string; challenge: string; now: Date },
): Promise<DomainRow | undefined> {
  return db
    .insertInto('sso_domains')
    .values({
      organization_id: tenant.organizationId,
      domain: values.domain,
      challenge: values.challenge,
      created_at: values.now,
    })
    .onConflict((oc) => oc.columns(['organization_id', 'domain']).doNothing())
    .returningAll()
    .executeTakeFirst()
}

export function listDomains(db: Executor, tenant: TenantScope): Promise<DomainRow[]> {
  return db
    .selectFrom('sso_domains')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .orderBy('domain')
    .execute()
}

export function findDomain(
  db: Executor,
  tenant: TenantScope,
  domain: string,
): Promise<DomainRow | undefined> {
  return db
    .selectFrom('sso_domains')
    .selectAll()
    .where('organization_id', '=', tenant.organizationId)
    .where('domain', '=', domain)
    .executeTakeFirst()
}

/** Records a lookup; `verified` also marks the domain verified (unique among verified rows). */
export function markDomainChecked(
  db: Executor,
  tenant: TenantScope,
  domain: string,
  values: { now: Date; verified: boolean },
): Promise<DomainRow | undefined> {
  return db
    .updateTable('sso_domains')
    .set(values.verified ? { checked_at: values.now, verified_at: values.now } : { checked_at: values.now })
    .where('organization_id', '=', tenant.organizationId)
    .where('domain', '=', domain)
    .returningAll()
    .executeTakeFirst()
}

export async function deleteDomain(db: Executor, tenant: TenantScope, domain: string): Promise<boolean> {
  const deleted = await db
    .deleteFrom('sso_domains')
    .where('organization_id', '=', tenant.organizationId)
    .where('domain', '=', domain)
    .returning('domain')
    .executeTakeFirst()
  return deleted !== undefined
}

/** The organization that verified the domain, if any (at most one can). */
export async function verifiedDomainOwner(db: Executor, domain: string): Promise<string | undefined> {
  const row = await db
    .selectFrom('sso_domains')
    .select('organization_id')
    .where('domain', '=', domain)
    .where('verified_at', 'is not', null)
    .executeTakeFirst()
  return row?.organization_id
}

/** Whether the organization has verified the domain. */
export async function isDomainVerifiedFor(
  db: Executor,
  organizationId: string,
  domain: string,
): Promise<boolean> {
  return (await verifiedDomainOwner(db, domain)) === organizationId
}

/** The enabled connection of an organization (at most one). */
export function findEnabledConnection(
  db: Executor,
  organizationId: string,
): Promise<ConnectionRow | undefined> {
  return db
    .selectFrom('sso_connections')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where('enabled', '=', true)
    .executeTakeFirst()
}

/** The account an identity (issuer, subject) is linked to, if any. */
export async function linkedAccount(
  db: Executor,
  issuer: string,
  subject: string,
): Promise<string | undefined> {
  const row = await db
    .selectFrom('federated_identities')
    .select('account_id')
    .where('issuer', '=', issuer)
    .where('subject', '=', subject)
    .executeTakeFirst()
  return row?.account_id
}
