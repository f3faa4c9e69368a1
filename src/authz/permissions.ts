import { AppError } from '../errors.ts'
import type { Principal } from '../principal.ts'
import { type AuthorizationPort, AuthorizationRequestError } from './port.ts'

/**
 * The permission questions domain code asks. Checks fail closed: an authorization server that
 * cannot answer gives 503 SERVICE_UNAVAILABLE, never an allow.
 */
export interface Permissions {
  /** Whether the principal has `relation` on `object` (`type:id`). */
  check(principal: Principal, relation: string, object: string): Promise<boolean>
  /** The same, as a guard: 403 ACCESS_DENIED when not allowed. */
  require(principal: Principal, relation: string, object: string): Promise<void>
}

/** The subject a principal is in the authorization model; service accounts are not tenant members. */
export function subjectOf(principal: Principal): string | null {
  if (principal.type === 'USER') return `user:${principal.userId}`
  if (principal.type === 'API_KEY') return `api_key:${principal.apiKeyId}`
  return null
}

export function createPermissions(
  port: AuthorizationPort,
  log: { error(fields: object, message: string): void },
): Permissions {
  async function check(principal: Principal, relation: string, object: string): Promise<boolean> {
    const subject = subjectOf(principal)
    if (!subject) return false
    try {
      return await port.check({ user: subject, relation, object })
    } catch (error) {
      if (error instanceof AuthorizationRequestError) throw new AppError('BAD_REQUEST', error.message)
      log.error({ err: error }, 'authorization check could not be answered')
      throw new AppError('SERVICE_UNAVAILABLE', 'The authorization server is unavailable', {
        headers: { 'retry-after': '5' },
        cause: error,
      })
    }
  }
  return {
    check,
    async require(principal, relation, object) {
      if (!(await check(principal, relation, object))) {
        throw new AppError('ACCESS_DENIED', 'You do not have access to this resource')
      }
    },
  }
}
