// An organization's webhook endpoints: managed by its admins, or API keys with `webhooks:write`.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses } from '../../errors.ts'
import { requirePrincipal } from '../../principal.ts'
import { AttemptCursor } from './repository.ts'
import {
  CreateWebhook,
  DeliveryAttemptPage,
  DeliveryQuery,
  UpdateWebhook,
  Webhook,
  WebhookList,
  WebhookParams,
  WebhookTest,
  WebhookWithSecret,
} from './schemas.ts'

const tags = ['webhooks']
const config = { scope: 'webhooks:write' } as const

const webhookRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(Webhook)
  const webhooks = app.services.webhooks

  app.post(
    '',
    {
      config,
      schema: {
        tags,
        operationId: 'createWebhook',
        summary: 'Add an endpoint; its signing secret is in this answer only; needs organization admin',
        body: CreateWebhook,
        response: { 201: WebhookWithSecret, ...problemResponses(400, 401, 403, 409) },
      },
    },
    async (request, reply) => {
      const created = await webhooks.create(requirePrincipal(request), request.body)
      return reply.code(201).header('location', `/api/webhooks/${created.id}`).send(created)
    },
  )

  app.get(
    '',
    {
      config,
      schema: {
        tags,
        operationId: 'listWebhooks',
        summary: 'The organization’s endpoints (at most 20); needs organization admin',
        response: { 200: WebhookList, ...problemResponses(401, 403) },
      },
    },
    async (request) => webhooks.list(requirePrincipal(request)),
  )

  app.get(
    '/:id',
    {
      config,
      schema: {
        tags,
        operationId: 'getWebhook',
        summary: 'One endpoint; needs organization admin',
        params: WebhookParams,
        response: { 200: Type.Ref('Webhook'), ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => webhooks.get(requirePrincipal(request), request.params.id),
  )

  app.patch(
    '/:id',
    {
      config,
      schema: {
        tags,
        operationId: 'updateWebhook',
        summary:
          'Change an endpoint’s URL, event types, description or enabled state; needs organization admin',
        params: WebhookParams,
        body: UpdateWebhook,
        response: { 200: Type.Ref('Webhook'), ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => webhooks.update(requirePrincipal(request), request.params.id, request.body),
  )

  app.delete(
    '/:id',
    {
      config,
      schema: {
        tags,
        operationId: 'deleteWebhook',
        summary: 'Remove an endpoint and what is queued for it; needs organization admin',
        params: WebhookParams,
        response: { 204: Type.Null({ description: 'Removed' }), ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      await webhooks.delete(requirePrincipal(request), request.params.id)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/:id/rotate-secret',
    {
      config,
      schema: {
        tags,
        operationId: 'rotateWebhookSecret',
        summary: 'A new signing secret (in this answer only); the old one signs beside it for 24 hours',
        params: WebhookParams,
        response: { 200: WebhookWithSecret, ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => webhooks.rotateSecret(requirePrincipal(request), request.params.id),
  )

  app.post(
    '/:id/test',
    {
      config,
      schema: {
        tags,
        operationId: 'testWebhook',
        summary: 'Queue a webhook.test message to the endpoint (one attempt, even while disabled)',
        params: WebhookParams,
        response: { 202: WebhookTest, ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request, reply) =>
      reply.code(202).send(await webhooks.test(requirePrincipal(request), request.params.id)),
  )

  app.get(
    '/:id/deliveries',
    {
      config,
      schema: {
        tags,
        operationId: 'listWebhookDeliveries',
        summary: 'The endpoint’s delivery attempts, newest first; needs organization admin',
        params: WebhookParams,
        querystring: DeliveryQuery,
        response: { 200: DeliveryAttemptPage, ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { limit, cursor } = request.query
      const page = await webhooks.attempts(requirePrincipal(request), request.params.id, {
        limit: limit ?? 50,
        ...(cursor === undefined ? {} : { after: AttemptCursor.decode(cursor) }),
      })
      return { items: page.items, nextCursor: page.next ? AttemptCursor.encode(page.next) : null }
    },
  )
}

export default webhookRoutes
