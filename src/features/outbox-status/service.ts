import type { Kysely } from 'kysely'
import { organizationAdmin, type Permissions } from '../../authz/permissions.ts'
import type { Database } from '../../db/schema.ts'
import { organizationDeadLetters, organizationOutboxCounts } from '../../outbox/status.ts'
import type { UserPrincipal } from '../../principal.ts'

/**
 * The organization's part of the mail and webhook outboxes, read by its admins (asked through the
 * authorization port): how many messages wait, how many were given up, and the latest given up with
 * the error that ended them. A mail is named by its template only, never its recipient or data.
 */
export class OutboxStatus {
  readonly #db: Kysely<Database>
  readonly #permissions: Permissions

  constructor(deps: { db: Kysely<Database>; permissions: Permissions }) {
    this.#db = deps.db
    this.#permissions = deps.permissions
  }

  async read(principal: UserPrincipal, limit: number) {
    const tenant = await organizationAdmin(this.#permissions, principal)
    const outboxes = await organizationOutboxCounts(this.#db, tenant)
    const deadLetters = await organizationDeadLetters(this.#db, tenant, limit)
    return {
      outboxes,
      deadLetters: deadLetters.map((letter) => ({ ...letter, failedAt: letter.failedAt.toISOString() })),
    }
  }
}
