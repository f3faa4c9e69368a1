import { currentTenant, requireTenant } from '../context.ts'

// The organization a query of tenant-owned rows is limited to. The repositories of tenant tables
// take a scope right after their executor and put its id in every statement's condition (or in the
// row they insert). Only the tenant context makes one: an organization id read from a row, a path
// parameter or an authorization tuple does not type-check where a scope is expected, so a tuple
// written by mistake cannot steer a query into another organization. Detached work enters the
// organization it carries with `runWithTenant` and takes the scope there.

declare const scoped: unique symbol

export interface TenantScope {
  readonly organizationId: string
  readonly [scoped]: true
}

/** The current organization's scope; 403 ORGANIZATION_REQUIRED for a principal without one. */
export function tenantScope(): TenantScope {
  return { organizationId: requireTenant() } as TenantScope
}

/** The current organization's scope, or null outside any organization (a service account). */
export function currentTenantScope(): TenantScope | null {
  const organizationId = currentTenant()
  return organizationId === null ? null : ({ organizationId } as TenantScope)
}
