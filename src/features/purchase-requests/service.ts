import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import { type AuditTrail, actorOf } from '../../audit/index.ts'
import type { Permissions } from '../../authz/permissions.ts'
import type { TupleRecorder } from '../../authz/tuples.ts'
import type { Clock } from '../../clock.ts'
import { type AlongWith, inTransaction } from '../../db/database.ts'
import { type Page, page, rowsToRead } from '../../db/paging.ts'
import type { Database } from '../../db/schema.ts'
import { currentTenantScope, type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError } from '../../errors.ts'
import { enqueueMail } from '../../mail/outbox.ts'
import type { Principal } from '../../principal.ts'
import { findAccountsOfOrganization } from '../accounts/index.ts'
import type { FileRow, FileService } from '../files/index.ts'
import { REPORT_CONTENT_TYPE, renderPurchaseRequestReport, reportFileName } from './report.ts'
import {
  insertPurchaseRequest,
  listPurchaseRequestEvents,
  movePurchaseRequest,
  type PageKey,
  type PurchaseRequestEventRow,
  type PurchaseRequestView,
  purchaseRequestExistsOutside,
  purchaseRequestQuery,
  purchaseRequestsQuery,
} from './repository.ts'
import {
  INITIAL_STATUS,
  nextStatus,
  type PurchaseRequestAction,
  type PurchaseRequestStatus,
} from './workflow.ts'

/**
 * What the service needs from the file feature: listing the files of a request it has checked,
 * storing generated ones.
 */
export type AttachmentStore = Pick<FileService, 'listOfCheckedResource' | 'storeGenerated'>

export interface PurchaseRequestDeps {
  /** The audit trail: each change of a request is recorded in its transaction. */
  audit: AuditTrail
  db: Kysely<Database>
  clock: Clock
  permissions: Permissions
  tuples: TupleRecorder
  files: AttachmentStore
  /** Base of the link to the request in the approval email (`platform.web.frontend-url`). */
  frontendUrl: string
}

export const TITLE_MAX = 255

/** The audit event type of each action: `purchase_request.<done>`. */
const DONE = { submit: 'submitted', approve: 'approved' } as const satisfies Record<
  PurchaseRequestAction,
  string
>

/** What may be attached to a purchase request: PDF, images, office documents, plain text and CSV. */
export const ATTACHMENT_CONTENT_TYPES = [
  'application/pdf',
  'image/png',
  'image/jpeg',
  'image/gif',
  'image/webp',
  'application/msword',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  'application/vnd.ms-excel',
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  'application/vnd.ms-powerpoint',
  'application/vnd.openxmlformats-officedocument.presentationml.presentation',
  'application/vnd.oasis.opendocument.text',
  'application/vnd.oasis.opendocument.spreadsheet',
  'text/plain',
  'text/csv',
] as const
const CONTROL_CHARACTERS = /\p{Cc}/u

const objectOf = (id: string) => `purchase_request:${id}`

/**
 * The example resource. The organization always comes from the request's tenant context, and every
 * statement is limited to it (a TenantScope), whatever the authorization tuples say; every read or
 * move is checked against the authorization model; every move is validated against the workflow
 * and written with its audit row in one transaction guarded on the current status.
 */
export class PurchaseRequests {
  readonly #deps: PurchaseRequestDeps

  constructor(deps: PurchaseRequestDeps) {
    this.#deps = deps
  }

  /** `along` runs in the create's transaction with the new request. */
  async create(
    principal: Principal,
    input: { title: string },
    along?: AlongWith<PurchaseRequestView>,
  ): Promise<PurchaseRequestView> {
    const { db, clock, permissions, audit } = this.#deps
    const tenant = tenantScope()
    const title = input.title.trim()
    // Characters, not UTF-16 units, as the schema and the database count them; no control characters.
    const length = [...title].length
    if (length === 0 || length > TITLE_MAX || CONTROL_CHARACTERS.test(title)) {
      throw new AppError('VALIDATION_FAILED', `The title must be 1 to ${TITLE_MAX} characters`, {
        extensions: {
          errors: [
            {
              path: 'body.title',
              message: `must be 1 to ${TITLE_MAX} characters, without control characters`,
            },
          ],
        },
      })
    }
    await permissions.require(principal, 'member', `organization:${tenant.organizationId}`)
    const now = clock.now()
    const at = now.toISOString()
    // What the insert writes is what the answer shows: nothing to read back.
    const created: PurchaseRequestView = {
      id: randomUUID(),
      organizationId: tenant.organizationId,
      createdBy: principal.id,
      title,
      status: INITIAL_STATUS,
      createdAt: at,
      updatedAt: at,
    }
    await inTransaction(db, async (trx) => {
      // Without this tuple not even the creator could read the request.
      await this.#deps.tuples.record(
        trx,
        [
          {
            operation: 'write',
            subject: `organization:${tenant.organizationId}`,
            relation: 'owner_organization',
            object: objectOf(created.id),
          },
        ],
        now,
      )
      // The row and its audit event in one statement.
      await insertPurchaseRequest(
        trx,
        tenant,
        { id: created.id, createdBy: principal.id, title, status: INITIAL_STATUS, now },
        audit.insertion(trx, {
          type: 'purchase_request.created',
          organizationId: tenant.organizationId,
          actor: actorOf(principal),
          subject: { type: 'purchase_request', id: created.id },
        }),
      )
      await along?.(trx, created)
    })
    await this.#deps.tuples.deliver()
    return created
  }

  /**
   * A request of the caller's organization they have `can_view` on. 404 for an unknown id; 403
   * ACCESS_DENIED without `can_view`, and for another organization's request whatever the tuples
   * say (it is never read).
   */
  async get(principal: Principal, id: string): Promise<PurchaseRequestView> {
    const { db, permissions } = this.#deps
    const tenant = currentTenantScope()
    // The row and the permission in one round trip with the embedded evaluator.
    const found = tenant
      ? await permissions.checkWithRead(
          principal,
          'can_view',
          objectOf(id),
          db,
          purchaseRequestQuery(db, tenant, id),
          { ifFound: true },
        )
      : { rows: [], allowed: false }
    const [row] = found.rows
    if (!row) {
      if (await purchaseRequestExistsOutside(db, tenant, id)) throw accessDenied()
      throw new AppError('NOT_FOUND', 'No such purchase request')
    }
    if (!found.allowed) throw accessDenied()
    return row
  }

  async list(
    principal: Principal,
    options: { status?: PurchaseRequestStatus | undefined; after?: PageKey | undefined; limit: number },
  ): Promise<Page<PurchaseRequestView, PageKey>> {
    const { db, permissions } = this.#deps
    const tenant = tenantScope()
    // The page and the membership in one round trip with the embedded evaluator. One row more than
    // asked tells whether another page follows.
    const { rows, allowed } = await permissions.checkWithRead(
      principal,
      'member',
      `organization:${tenant.organizationId}`,
      db,
      purchaseRequestsQuery(db, tenant, { ...options, limit: rowsToRead(options.limit) }),
    )
    if (!allowed) throw accessDenied()
    // The cursor's time is the text's millisecond, as it was the Date's.
    return page(rows, options.limit, (last) => ({ createdAt: new Date(last.createdAt), id: last.id }))
  }

  async history(principal: Principal, id: string): Promise<PurchaseRequestEventRow[]> {
    await this.get(principal, id)
    return listPurchaseRequestEvents(this.#deps.db, tenantScope(), id)
  }

  /**
   * Renders the one-page PDF summary and stores it as a CONFIRMED attachment of the request, in
   * this one call. Needs `can_view` only, not the `can_edit` an upload needs: the report is a read
   * of the request, its bytes are produced here from what the caller may already see, so a viewer
   * adds no content of their own; the file is recorded as created by the caller.
   */
  async report(principal: Principal, id: string): Promise<FileRow> {
    const { db, clock, files } = this.#deps
    // `can_view` is checked once, here; the request is the caller's organization's, where the file
    // is stored.
    const row = await this.get(principal, id)
    const tenant = tenantScope()
    const [events, attachments] = await Promise.all([
      listPurchaseRequestEvents(db, tenant, id),
      files.listOfCheckedResource('purchase_request', id),
    ])
    const names = await this.#displayNames(tenant, [row.createdBy, ...events.map((event) => event.actor_id)])
    const name = (principalId: string) => names.get(principalId) ?? principalId
    const bytes = await renderPurchaseRequestReport({
      id: row.id,
      title: row.title,
      status: row.status,
      creator: name(row.createdBy),
      createdAt: new Date(row.createdAt),
      updatedAt: new Date(row.updatedAt),
      history: events.map((event) => ({
        action: event.action,
        fromStatus: event.from_status,
        toStatus: event.to_status,
        actor: name(event.actor_id),
        occurredAt: event.occurred_at,
      })),
      attachments: attachments.map((file) => file.original_file_name),
      generatedAt: clock.now(),
    })
    return files.storeGenerated(principal, {
      resourceType: 'purchase_request',
      resourceId: id,
      fileName: reportFileName(id),
      contentType: REPORT_CONTENT_TYPE,
      bytes,
    })
  }

  /** The emails of the principals that are accounts of the organization (one query); others keep their id. */
  async #displayNames(tenant: TenantScope, principalIds: string[]): Promise<Map<string, string>> {
    const accounts = await findAccountsOfOrganization(this.#deps.db, tenant, principalIds)
    return new Map(accounts.map((account) => [account.id, account.email]))
  }

  /**
   * Applies a workflow action. Submit needs the creator or `can_edit`, approve needs `can_edit`.
   * Of two parallel approvals one succeeds; the other finds the status moved and gets 409
   * INVALID_TRANSITION: one audit row, one email.
   */
  async transition(
    principal: Principal,
    id: string,
    action: PurchaseRequestAction,
  ): Promise<PurchaseRequestView> {
    const { db, clock, permissions, audit } = this.#deps
    const current = await this.get(principal, id)
    const tenant = tenantScope()
    const mayAct =
      (action === 'submit' && current.createdBy === principal.id) ||
      (await permissions.check(principal, 'can_edit', objectOf(id)))
    if (!mayAct) throw new AppError('ACCESS_DENIED', `You may not ${action} this purchase request`)
    const invalid = () =>
      new AppError(
        'INVALID_TRANSITION',
        `${/^[AEIOU]/.test(current.status) ? 'An' : 'A'} ${current.status} purchase request cannot be ${action === 'submit' ? 'submitted' : 'approved'}`,
      )
    const to = nextStatus(current.status, action)
    if (!to) throw invalid()
    const now = clock.now()
    return inTransaction(db, async (trx) => {
      // The move, its history row and its audit event in one statement.
      const moved = await movePurchaseRequest(
        trx,
        tenant,
        { id, from: current.status, to, action, actorId: principal.id, now },
        (onlyIfMoved) =>
          audit.insertion(
            trx,
            {
              type: `purchase_request.${DONE[action]}`,
              organizationId: tenant.organizationId,
              actor: actorOf(principal),
              subject: { type: 'purchase_request', id },
              data: { from: current.status, to },
            },
            onlyIfMoved,
          ),
      )
      if (!moved) throw invalid()
      if (action === 'approve') {
        // The creator is emailed when they are a platform account (an API key has no mailbox).
        const [creator] = await findAccountsOfOrganization(trx, tenant, [moved.createdBy])
        if (creator) {
          await enqueueMail(
            trx,
            {
              template: 'purchase_request_approved',
              to: creator.email,
              data: {
                title: moved.title,
                link: new URL(`/purchase-requests/${id}`, this.#deps.frontendUrl).toString(),
              },
              organizationId: tenant.organizationId,
            },
            now,
          )
        }
      }
      return moved
    })
  }
}

const accessDenied = () => new AppError('ACCESS_DENIED', 'You do not have access to this resource')
