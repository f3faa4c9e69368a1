import type { Kysely } from 'kysely'
import { isDataException } from '../db/database.ts'
import type { Database } from '../db/schema.ts'
import { type TenantScope, tenantScope } from '../db/tenant-scope.ts'
import { AppError } from '../errors.ts'
import type { Principal } from '../principal.ts'
import { type AuthorizationPort, AuthorizationRequestError, type CheckRequest } from './port.ts'
import type { RowsRead } from './tuple-store.ts'

/**
 * The permission questions domain code asks. Checks fail closed: an authorization server that
 * cannot answer gives 503 SERVICE_UNAVAILABLE, never an allow.
 */
export interface Permissions {
  /** Whether the principal has `relation` on `object` (`type:id`). */
  check(principal: Principal, relation: string, object: string): Promise<boolean>
  /** The same, as a guard: 403 ACCESS_DENIED when not allowed. */
  require(principal: Principal, relation: string, object: string): Promise<void>
  /**
   * `check`, and a read from `db` (the object's row, a page of what the check guards): in one round
   * trip with the embedded evaluator. With `ifFound`, a read that finds nothing is not asked about
   * (`allowed` false) where the question would cost a call of its own: a missing object is a 404,
   * also while an authorization server is down. A page needs its answer even when empty.
   */
  checkWithRead<Row extends object>(
    principal: Principal,
    relation: string,
    object: string,
    db: Kysely<Database>,
    read: RowsRead<Row>,
    options?: { ifFound?: boolean },
  ): Promise<{ allowed: boolean; rows: Row[] }>
}

/**
 * The caller's organization, once a user caller is found to be one of its admins (403
 * ACCESS_DENIED otherwise). A machine principal reaches an admin operation only with the scope its
 * route declares, which the route guard has checked.
 */
export async function organizationAdmin(
  permissions: Permissions,
  principal: Principal,
): Promise<TenantScope> {
  const tenant = tenantScope()
  if (principal.type === 'USER')
    await permissions.require(principal, 'admin', `organization:${tenant.organizationId}`)
  return tenant
}

/**
 * An evaluator that reads tuples from the application's database can answer a check together with
 * a read of that database, in one statement (the embedded evaluator). The authorization port has no
 * such operation: an authorization server is asked after the read.
 */
export interface CheckAlongRead {
  /** Exactly `check`'s answer, and the read's rows. */
  checkWithRead<Row extends object>(
    request: CheckRequest,
    db: Kysely<Database>,
    read: RowsRead<Row>,
  ): Promise<{ allowed: boolean; rows: Row[] }>
}

/** The subject a principal is in the authorization model; service accounts are not tenant members. */
export function subjectOf(principal: Principal): string | null {
  if (principal.type === 'USER') return `user:${principal.userId}`
  if (principal.type === 'API_KEY') return `api_key:${principal.apiKeyId}`
  return null
}

/**
 * Tuple changes queued for an authorization server and not delivered yet (the outbox). A change
 * is delivered after its transaction commits, without holding the response; a check that would
 * deny while a change about its subject or object waits delivers first, so a creator can read
 * what they just created (read-your-writes) at the cost of one indexed lookup and a second
 * question on denials only.
 */
export interface PendingTupleChanges {
  waiting(subject: string, object: string): Promise<boolean>
  /** Delivers what is queued now; never throws (what fails stays queued). */
  deliver(): Promise<void>
}

export function createPermissions(
  port: AuthorizationPort,
  log: { error(fields: object, message: string): void },
  pending?: PendingTupleChanges,
  alongRead?: CheckAlongRead,
): Permissions {
  async function check(principal: Principal, relation: string, object: string): Promise<boolean> {
    const subject = subjectOf(principal)
    if (!subject) return false
    if (await ask(subject, relation, object)) return true
    return askAfterQueue(subject, relation, object)
  }

  /**
   * A no may predate a delivery that finished while it was asked: once the queue has been looked
   * at, every change committed before that look is either still queued (delivered now) or at the
   * server, so the question asked again after the look sees it, provided it is answered from the
   * tuples and not from the server's cache of the first answer (fresh). What cannot be delivered now
   * (the server is down) stays queued, and the answer stays no.
   */
  async function askAfterQueue(subject: string, relation: string, object: string): Promise<boolean> {
    if (!pending) return false
    if (await pending.waiting(subject, object)) await pending.deliver()
    return ask(subject, relation, object, true)
  }

  async function checkWithRead<Row extends object>(
    principal: Principal,
    relation: string,
    object: string,
    db: Kysely<Database>,
    read: RowsRead<Row>,
    options: { ifFound?: boolean } = {},
  ): Promise<{ allowed: boolean; rows: Row[] }> {
    const subject = subjectOf(principal)
    if (!subject || !alongRead) {
      const rows = await read.execute()
      if (options.ifFound && rows.length === 0) return { allowed: false, rows }
      return { allowed: await check(principal, relation, object), rows }
    }
    const answer = await answered(() =>
      alongRead.checkWithRead({ user: subject, relation, object }, db, read),
    )
    if (answer.allowed) return answer
    return { allowed: await askAfterQueue(subject, relation, object), rows: answer.rows }
  }

  function ask(subject: string, relation: string, object: string, fresh = false): Promise<boolean> {
    return answered(() => port.check({ user: subject, relation, object, fresh }))
  }

  /**
   * An answer of the port; 400 for a question the model cannot express, 503 when it cannot answer.
   * A value the database refuses as data (SQLSTATE class 22) goes up as it is, for the error
   * handler's 400: the request is at fault, not the authorization server.
   */
  async function answered<T>(question: () => Promise<T>): Promise<T> {
    try {
      return await question()
    } catch (error) {
      if (error instanceof AuthorizationRequestError) throw new AppError('BAD_REQUEST', error.message)
      if (isDataException(error)) throw error
      log.error({ err: error }, 'authorization check could not be answered')
      throw new AppError('SERVICE_UNAVAILABLE', 'The authorization server is unavailable', {
        headers: { 'retry-after': '5' },
        cause: error,
      })
    }
  }
  return {
    check,
    checkWithRead,
    async require(principal, relation, object) {
      if (!(await check(principal, relation, object))) {
        throw new AppError('ACCESS_DENIED', 'You do not have access to this resource')
      }
    },
  }
}
