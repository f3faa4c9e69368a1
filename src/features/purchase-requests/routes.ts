// The example resource: purchase requests with a workflow, audit history, keyset
// paging, attachments through the generic file endpoints and a generated PDF report. This file is
// the template for adding a resource (README, "Adding a resource").
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { problemResponses } from '../../errors.ts'
import { idempotentCreate } from '../../http/idempotency.ts'
import { requirePrincipal } from '../../principal.ts'
import { FileRecord, fileLocation, toFileRecord } from '../files/index.ts'
import {
  PurchaseRequestCursor,
  type PurchaseRequestEventRow,
  type PurchaseRequestView,
} from './repository.ts'
import {
  CreatePurchaseRequest,
  History,
  HistoryEntry,
  ListQuery,
  PurchaseRequest,
  PurchaseRequestPage,
  PurchaseRequestParams,
} from './schemas.ts'

const toHistoryEntry = (row: PurchaseRequestEventRow) => ({
  action: row.action,
  fromStatus: row.from_status,
  toStatus: row.to_status,
  actorId: row.actor_id,
  occurredAt: row.occurred_at.toISOString(),
})

const purchaseRequestRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(PurchaseRequest)
  app.addSchema(HistoryEntry)
  // Attachments go through the generic file endpoints with resourceType purchase_request (the
  // binding is in src/features/compose.ts).
  const service = app.services.purchaseRequests
  const read = { scope: 'purchase_requests:read' } as const
  const write = { scope: 'purchase_requests:write' } as const
  const tags = ['purchase-requests']
  const one = { 200: PurchaseRequest, ...problemResponses(401, 403, 404, 409) }

  app.post(
    '',
    {
      config: { ...write, idempotent: true },
      schema: {
        tags,
        operationId: 'createPurchaseRequest',
        summary: "Create a DRAFT purchase request in the caller's organization",
        body: CreatePurchaseRequest,
        response: { 201: PurchaseRequest, ...problemResponses(401, 403) },
      },
    },
    async (request, reply) => {
      const answer = (created: PurchaseRequestView) => ({
        status: 201,
        location: `/api/purchase-requests/${created.id}`,
        body: created,
      })
      return idempotentCreate(request, reply, answer, (along) =>
        service.create(requirePrincipal(request), request.body, along),
      )
    },
  )

  app.get(
    '',
    {
      config: read,
      schema: {
        tags,
        operationId: 'listPurchaseRequests',
        summary: "The caller's organization's purchase requests, newest first (keyset paging)",
        querystring: ListQuery,
        response: { 200: PurchaseRequestPage, ...problemResponses(401, 403) },
      },
    },
    async (request) => {
      const { limit, cursor, status } = request.query
      const page = await service.list(requirePrincipal(request), {
        limit: limit ?? 20,
        status,
        after: cursor === undefined ? undefined : PurchaseRequestCursor.decode(cursor),
      })
      return {
        items: page.items,
        nextCursor: page.next ? PurchaseRequestCursor.encode(page.next) : null,
      }
    },
  )

  app.get(
    '/:id',
    {
      config: read,
      schema: {
        tags,
        operationId: 'getPurchaseRequest',
        summary: 'One purchase request (needs can_view)',
        params: PurchaseRequestParams,
        response: { 200: PurchaseRequest, ...problemResponses(401, 403, 404) },
      },
    },
    async (request) => service.get(requirePrincipal(request), request.params.id),
  )

  app.get(
    '/:id/history',
    {
      config: read,
      schema: {
        tags,
        operationId: 'getPurchaseRequestHistory',
        summary: 'The audit rows of a purchase request, oldest first',
        params: PurchaseRequestParams,
        response: { 200: History, ...problemResponses(401, 403, 404) },
      },
    },
    async (request) => {
      const events = await service.history(requirePrincipal(request), request.params.id)
      return { items: events.map(toHistoryEntry) }
    },
  )

  app.post(
    '/:id/report',
    {
      config: write,
      schema: {
        tags,
        operationId: 'createPurchaseRequestReport',
        summary: 'Generate a one-page PDF summary, stored as a CONFIRMED attachment (needs can_view)',
        description:
          'Renders title, status, creator, dates, history and attachment names into an A4 PDF and stores it ' +
          'through the file service as `purchase-request-<id>.pdf`; download it with the file endpoints. ' +
          'Needs `can_view`, not the `can_edit` an upload needs: the service produces the bytes from what the ' +
          'caller may already read. Characters the embedded font (DejaVu Sans) cannot draw, such as CJK or ' +
          "emoji, are shown as '?'.",
        params: PurchaseRequestParams,
        response: { 201: FileRecord, ...problemResponses(401, 403, 404, 413, 503) },
      },
    },
    async (request, reply) => {
      const file = await service.report(requirePrincipal(request), request.params.id)
      return reply.code(201).header('location', fileLocation(file.id)).send(toFileRecord(file))
    },
  )

  for (const action of ['submit', 'approve'] as const) {
    app.post(
      `/:id/${action}`,
      {
        config: write,
        schema: {
          tags,
          operationId: `${action}PurchaseRequest`,
          summary:
            action === 'submit'
              ? 'DRAFT → SUBMITTED (the creator or can_edit)'
              : 'SUBMITTED → APPROVED (can_edit); emails the creator',
          params: PurchaseRequestParams,
          response: one,
        },
      },
      async (request) => service.transition(requirePrincipal(request), request.params.id, action),
    )
  }
}

export default purchaseRequestRoutes
