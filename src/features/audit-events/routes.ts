// The audit trail of the caller's organization: a page at a time, or all of a time range as NDJSON.
import { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { problemResponses } from '../../errors.ts'
import { requirePrincipal } from '../../principal.ts'
import { AuditEventCursor, type AuditFilter } from './repository.ts'
import { AuditEventPage, AuditExportQuery, AuditListQuery } from './schemas.ts'

const tags = ['audit']

const filterOf = (query: Record<string, string | number | undefined>): AuditFilter => ({
  type: query.type as string | undefined,
  actorType: query.actorType as string | undefined,
  actorId: query.actorId as string | undefined,
  subjectType: query.subjectType as string | undefined,
  subjectId: query.subjectId as string | undefined,
  from: query.from ? new Date(query.from as string) : undefined,
  to: query.to ? new Date(query.to as string) : undefined,
})

const auditRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const events = app.services.auditEvents

  app.get(
    '',
    {
      config: { scope: 'audit:read' },
      schema: {
        tags,
        operationId: 'listAuditEvents',
        summary:
          'The organization’s audit events, newest first, with the chain’s head; needs organization admin',
        querystring: AuditListQuery,
        response: { 200: AuditEventPage, ...problemResponses(400, 401, 403) },
      },
    },
    async (request) => {
      const { limit, cursor } = request.query
      const page = await events.page(requirePrincipal(request), filterOf(request.query), {
        limit: limit ?? 50,
        ...(cursor === undefined ? {} : { after: AuditEventCursor.decode(cursor) }),
      })
      return {
        items: page.items,
        nextCursor: page.next ? AuditEventCursor.encode(page.next) : null,
        head: page.head,
      }
    },
  )

  app.get(
    '/export',
    {
      config: { scope: 'audit:read' },
      schema: {
        tags,
        operationId: 'exportAuditEvents',
        summary: 'Every matching event, oldest first, as NDJSON (streamed); needs organization admin',
        description:
          'One AuditEvent per line, up to the chain’s head when the export began, named by X-Audit-Head ' +
          '(`<sequence>:<hash>`, empty before the first event). No page limit: read from the database 500 events at a time and written 50 lines at a time, never held whole.',
        querystring: AuditExportQuery,
        response: {
          200: {
            description: 'The events, one JSON object per line',
            headers: {
              'X-Audit-Head': { type: 'string', description: '<sequence>:<hash> of the chain’s head' },
            },
            content: { 'application/x-ndjson': { schema: { type: 'string' } } },
          },
          ...problemResponses(400, 401, 403),
        },
      },
    },
    async (request, reply) => {
      const { head, lines } = await events.export(requirePrincipal(request), filterOf(request.query))
      reply.header('x-audit-head', head ? `${head.sequence}:${head.hash}` : '')
      reply.type('application/x-ndjson')
      return reply.send(Readable.from(lines))
    },
  )
}

export default auditRoutes
