import type { FastifyRequest } from 'fastify'
import { AppError } from './errors.ts'

// The three kinds of caller. Exactly one principal, or none, per request.

export interface UserPrincipal {
  readonly type: 'USER'
  readonly id: string
  readonly userId: string
  readonly organizationId: string
  readonly sessionId: string
  /** The organization admin acting as this user (impersonation: the token's `act.sub`); absent otherwise. */
  readonly impersonatorId?: string
}

export interface ServiceAccountPrincipal {
  readonly type: 'SERVICE_ACCOUNT'
  readonly id: string
  readonly serviceAccountId: string
  readonly clientId: string
  readonly scopes: ReadonlySet<string>
  readonly organizationId: null
}

export interface ApiKeyPrincipal {
  readonly type: 'API_KEY'
  readonly id: string
  readonly apiKeyId: string
  readonly organizationId: string
  readonly scopes: ReadonlySet<string>
}

export type Principal = UserPrincipal | ServiceAccountPrincipal | ApiKeyPrincipal

/** The request's principal, or 401 AUTHENTICATION_REQUIRED. */
export function requirePrincipal(request: FastifyRequest): Principal {
  if (!request.principal)
    throw new AppError('AUTHENTICATION_REQUIRED', 'This endpoint requires authentication')
  return request.principal
}

/** The request's user principal, or 401 (no principal) / 403 (a machine principal). */
export function requireUser(request: FastifyRequest): UserPrincipal {
  const principal = requirePrincipal(request)
  if (principal.type !== 'USER')
    throw new AppError('ACCESS_DENIED', 'This endpoint is for signed-in users only')
  return principal
}
