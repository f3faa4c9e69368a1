import { AsyncLocalStorage } from 'node:async_hooks'
import { AppError } from './errors.ts'

// The only module that touches AsyncLocalStorage. Each request runs inside a tenant context
// (entered by src/http/tenant.ts); domain code reads the organization from here, not from a
// parameter. Detached work (timers, queues) does not inherit it: pass the organization explicitly
// and enter it with `runWithTenant`.

export interface TenantContext {
  readonly organizationId: string | null
  /** The request the context runs for (absent outside a request); read only by the audit trail. */
  readonly request?: OriginSource
}

/** What a request says of where it came from (a FastifyRequest is one). */
export interface OriginSource {
  /** The client address as `platform.server.trust-proxy` decides it. */
  readonly ip: string
  readonly id: string
  readonly headers: { readonly 'user-agent'?: string | undefined }
  /** The request's principal: an admin impersonating a user is named by `impersonatorId`. */
  readonly principal?: {
    readonly type: string
    readonly userId?: string
    readonly impersonatorId?: string
  } | null
}

/** Who sent the request, as the audit trail records it. */
export interface RequestOrigin {
  readonly ipAddress: string
  readonly userAgent: string | null
  readonly requestId: string
  /** Set when an organization admin acting as a user sent the request. */
  readonly impersonation?: { readonly userId: string; readonly impersonatorId: string }
}

const storage = new AsyncLocalStorage<TenantContext>()

export function runWithTenant<T>(organizationId: string | null, fn: () => T): T {
  return storage.run({ organizationId }, fn)
}

/** Enters an existing context object; used by the tenant plugin's hooks. */
export function enterTenantContext(context: TenantContext, fn: () => void): void {
  storage.run(context, fn)
}

/** Where the current request came from; null outside a request (the CLI, workers). */
export function currentRequestOrigin(): RequestOrigin | null {
  const request = storage.getStore()?.request
  if (!request) return null
  const origin = {
    ipAddress: request.ip,
    userAgent: request.headers['user-agent'] ?? null,
    requestId: request.id,
  }
  const { userId, impersonatorId } = request.principal ?? {}
  return userId && impersonatorId ? { ...origin, impersonation: { userId, impersonatorId } } : origin
}

export function currentTenant(): string | null {
  return storage.getStore()?.organizationId ?? null
}

/** The current organization, or 403 ORGANIZATION_REQUIRED for principals without one. */
export function requireTenant(): string {
  const organizationId = currentTenant()
  if (organizationId === null) {
    throw new AppError(
      'ORGANIZATION_REQUIRED',
      'This operation needs a principal that belongs to an organization',
    )
  }
  return organizationId
}
