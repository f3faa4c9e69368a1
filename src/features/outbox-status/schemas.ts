import { Type } from '@sinclair/typebox'

const Kind = Type.Union([Type.Literal('mail'), Type.Literal('webhook')])

export const OutboxStatusQuery = Type.Object(
  {
    limit: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'How many dead letters' }),
    ),
  },
  { additionalProperties: false },
)

export const OutboxCounts = Type.Object(
  {
    kind: Kind,
    pending: Type.Integer({ description: 'Waiting for delivery: due, or backing off after a failure' }),
    deadLetters: Type.Integer({ description: 'Given up: attempts exhausted, or never deliverable' }),
  },
  { title: 'OutboxCounts', additionalProperties: false },
)

export const DeadLetter = Type.Object(
  {
    kind: Kind,
    id: Type.String(),
    what: Type.String({
      description:
        'A mail’s template (never its recipient or data); a webhook message’s event type and endpoint',
    }),
    attempts: Type.Integer(),
    failedAt: Type.String({ format: 'date-time' }),
    lastError: Type.Union([Type.String(), Type.Null()], {
      description: 'The error of the last attempt, addresses and links removed',
    }),
  },
  { title: 'DeadLetter', description: 'A message the service gave up on', additionalProperties: false },
)

export const OrganizationOutboxStatus = Type.Object(
  {
    outboxes: Type.Array(OutboxCounts),
    deadLetters: Type.Array(DeadLetter, { description: 'Newest first' }),
  },
  {
    title: 'OrganizationOutboxStatus',
    description: 'The organization’s mail and webhook outboxes',
    additionalProperties: false,
  },
)
