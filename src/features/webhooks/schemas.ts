import { Type } from '@sinclair/typebox'
import { AUDIT_EVENT_TYPES } from '../../audit/index.ts'
import { Cursor } from '../../db/paging.ts'
import { Uuid } from '../../uuid.ts'

const DateTime = Type.String({ format: 'date-time' })

const EventType = Type.String({
  pattern: '^(\\*|[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+)$',
  maxLength: 100,
  description: `An audit event type, or \`*\` for every type. The service's: ${AUDIT_EVENT_TYPES.join(', ')}`,
})

const Url = Type.String({
  minLength: 1,
  maxLength: 2000,
  description:
    'Where deliveries are posted: https, to a public address (http and private addresses only with ' +
    '`platform.webhooks.allow-private-networks`)',
})

const Description = Type.String({ maxLength: 500, pattern: '^[^\\x00-\\x08\\x0b-\\x1f\\x7f]*$' })

export const WebhookParams = Type.Object({ id: Uuid })

export const CreateWebhook = Type.Object(
  {
    url: Url,
    eventTypes: Type.Array(EventType, { minItems: 1, maxItems: 50 }),
    description: Type.Optional(Description),
    enabled: Type.Optional(Type.Boolean({ default: true })),
  },
  { title: 'CreateWebhook', additionalProperties: false },
)

export const UpdateWebhook = Type.Object(
  {
    url: Type.Optional(Url),
    eventTypes: Type.Optional(Type.Array(EventType, { minItems: 1, maxItems: 50 })),
    description: Type.Optional(Description),
    enabled: Type.Optional(
      Type.Boolean({ description: 'true enables a disabled endpoint again, with a clean failure record' }),
    ),
  },
  { title: 'UpdateWebhook', additionalProperties: false, minProperties: 1 },
)

export const Webhook = Type.Object(
  {
    id: Uuid,
    url: Type.String(),
    description: Type.String(),
    eventTypes: Type.Array(Type.String()),
    enabled: Type.Boolean(),
    disabledReason: Type.Union([Type.Literal('gone'), Type.Literal('failing'), Type.Null()], {
      description: 'Why the service disabled it: it answered 410 Gone, or it kept failing; null otherwise',
    }),
    previousSecretExpiresAt: Type.Union([DateTime, Type.Null()], {
      description:
        'Until then deliveries carry a second signature, made with the secret before the last rotation',
    }),
    createdAt: DateTime,
    updatedAt: DateTime,
  },
  { $id: 'Webhook', title: 'Webhook', description: 'A webhook endpoint', additionalProperties: false },
)

export const WebhookWithSecret = Type.Object(
  {
    ...Webhook.properties,
    secret: Type.String({
      description: 'The signing secret (`whsec_…`, Standard Webhooks): shown this once, stored sealed',
    }),
  },
  {
    title: 'WebhookWithSecret',
    description: 'The endpoint, with its signing secret (this answer only)',
    additionalProperties: false,
  },
)

export const WebhookList = Type.Object(
  { items: Type.Array(Type.Ref('Webhook')) },
  {
    title: 'WebhookList',
    description: 'Every endpoint of the organization, oldest first',
    additionalProperties: false,
  },
)

export const WebhookTest = Type.Object(
  { messageId: Type.String({ description: 'The webhook-id the ping is delivered with' }) },
  { title: 'WebhookTest', description: 'The ping is queued', additionalProperties: false },
)

export const DeliveryAttempt = Type.Object(
  {
    id: Type.String(),
    messageId: Type.String({ description: 'The webhook-id header: the same on every attempt of a message' }),
    eventType: Type.String(),
    attempt: Type.Integer({ description: 'The message’s attempt number, from 1' }),
    attemptedAt: DateTime,
    statusCode: Type.Union([Type.Integer(), Type.Null()], {
      description: 'The receiver’s status; null when no answer came (refused, unreachable, timed out)',
    }),
    durationMs: Type.Integer(),
    error: Type.Union([Type.String(), Type.Null()]),
    outcome: Type.Union(
      [
        Type.Literal('delivered'),
        Type.Literal('retrying'),
        Type.Literal('dead_letter'),
        Type.Literal('endpoint_disabled'),
      ],
      { description: 'What the attempt led to' },
    ),
  },
  { title: 'DeliveryAttempt', additionalProperties: false },
)

export const DeliveryAttemptPage = Type.Object(
  {
    items: Type.Array(DeliveryAttempt),
    nextCursor: Type.Union([Type.String(), Type.Null()], {
      description: 'Pass as cursor for older attempts',
    }),
  },
  { title: 'DeliveryAttemptPage', description: 'Attempts, newest first', additionalProperties: false },
)

export const DeliveryQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50 })),
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)
