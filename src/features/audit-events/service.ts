import type { Kysely } from 'kysely'
import { type AuditChainer, publicEvent, toStoredEvent } from '../../audit/index.ts'
import { organizationAdmin, type Permissions } from '../../authz/permissions.ts'
import { page, rowsToRead } from '../../db/paging.ts'
import type { Database } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import type { Principal } from '../../principal.ts'
import {
  type AuditEventRow,
  type AuditFilter,
  type AuditPageKey,
  chainHead,
  exportBatch,
  listAuditEvents,
} from './repository.ts'

const EXPORT_BATCH = 500
/** Lines of a batch joined into one write of the export (some 30 kB). */
const LINES_PER_WRITE = 50

/** A row as the API shows it. */
export const toAuditEvent = (row: AuditEventRow) => publicEvent(toStoredEvent(row))

/**
 * Reading the audit trail: an organization's admins (asked through the authorization port), and
 * API keys with `audit:read` (checked by the route guard), see their own organization's events only.
 */
export class AuditEvents {
  readonly #db: Kysely<Database>
  readonly #permissions: Permissions
  readonly #chainer: AuditChainer

  constructor(deps: { db: Kysely<Database>; permissions: Permissions; chainer: AuditChainer }) {
    this.#db = deps.db
    this.#permissions = deps.permissions
    this.#chainer = deps.chainer
  }

  /**
   * The caller's organization, once every event of its chain committed so far has its place: a
   * reader sees the events of what it just did, with sequence and hash, whichever instance wrote them.
   */
  async #authorize(principal: Principal): Promise<TenantScope> {
    const tenant = await organizationAdmin(this.#permissions, principal)
    await this.#chainer.settle(tenant.organizationId)
    return tenant
  }

  async page(principal: Principal, filter: AuditFilter, options: { limit: number; after?: AuditPageKey }) {
    const tenant = await this.#authorize(principal)
    // The head first: every event listed is at or below it.
    const head = await chainHead(this.#db, tenant)
    const rows = await listAuditEvents(this.#db, tenant, filter, {
      ...options,
      limit: rowsToRead(options.limit),
    })
    const { items, next } = page(rows, options.limit, (last) => ({ sequence: last.sequence }))
    return { items: items.map(toAuditEvent), next, head }
  }

  /**
   * The events matching the filter, oldest first, as NDJSON text, read a batch at a time up to the
   * head as it was when the export began (the export is never held whole).
   */
  async export(principal: Principal, filter: AuditFilter) {
    const tenant = await this.#authorize(principal)
    const head = await chainHead(this.#db, tenant)
    const db = this.#db
    // Each string it yields is LINES_PER_WRITE lines (fewer at the end of a batch), one write of
    // the response, where a string per line cost a promise, a read of the stream and a chunk of
    // the response each. Writing a batch then allocates less, fewer scavenges run during the
    // export, and less of what is still reachable when one runs is promoted to the old generation
    // (measured by `BENCH_ONLY='audit export' npm run bench`, see test/bench/audit-export.ts).
    async function* lines(): AsyncGenerator<string> {
      if (!head) return
      let after = 0
      for (;;) {
        // An array of exportBatch's own, which nothing keeps past the next batch.
        const batch = await exportBatch(db, tenant, filter, after, EXPORT_BATCH)
        let text = ''
        let count = 0
        for (const row of batch) {
          if (Number(row.sequence) > head.sequence) break
          text += `${row.line}\n`
          if (++count === LINES_PER_WRITE) {
            yield text
            text = ''
            count = 0
          }
        }
        if (text) yield text
        const last = batch.at(-1)
        if (!last || batch.length < EXPORT_BATCH || Number(last.sequence) > head.sequence) return
        after = Number(last.sequence)
      }
    }
    return { head, lines: lines() }
  }
}
