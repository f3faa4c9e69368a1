import { Type } from '@sinclair/typebox'
import { Cursor } from '../../db/paging.ts'

const DateTime = Type.String({ format: 'date-time' })
const Text = (description: string) =>
  Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: '^[^\\x00-\\x1f\\x7f]+$', description }))

export const AuditEvent = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    sequence: Type.Integer({ description: 'The event’s place in its organization’s chain, from 1' }),
    occurredAt: DateTime,
    type: Type.String({ description: 'What happened, e.g. sign_in.succeeded, api_key.revoked' }),
    actor: Type.Object(
      {
        type: Type.Union([
          Type.Literal('user'),
          Type.Literal('api_key'),
          Type.Literal('service_account'),
          Type.Literal('system'),
        ]),
        id: Type.Union([Type.String(), Type.Null()]),
      },
      { additionalProperties: false },
    ),
    subject: Type.Union([
      Type.Object({ type: Type.String(), id: Type.String() }, { additionalProperties: false }),
      Type.Null(),
    ]),
    ipAddress: Type.Union([Type.String(), Type.Null()]),
    userAgent: Type.Union([Type.String(), Type.Null()]),
    requestId: Type.Union([Type.String(), Type.Null()]),
    data: Type.Record(Type.String(), Type.Union([Type.String(), Type.Number(), Type.Boolean(), Type.Null()])),
    previousHash: Type.String({ description: 'The hash this event is chained to' }),
    hash: Type.String({ description: 'HMAC-SHA256 over the previous hash and the event (hex)' }),
  },
  { title: 'AuditEvent', description: 'One recorded event', additionalProperties: false },
)

const ChainHead = Type.Union(
  [
    Type.Object(
      { sequence: Type.Integer(), hash: Type.String() },
      {
        additionalProperties: false,
        description: 'The newest event of the chain: pin it to detect a cut tail',
      },
    ),
    Type.Null(),
  ],
  { description: 'The chain’s head when the page was read; null before the first event' },
)

export const AuditEventPage = Type.Object(
  {
    items: Type.Array(AuditEvent),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as cursor for older events' }),
    head: ChainHead,
  },
  {
    title: 'AuditEventPage',
    description: 'Events of the caller’s organization, newest first',
    additionalProperties: false,
  },
)

const Filter = {
  type: Text('Only events of this type'),
  actorType: Type.Optional(
    Type.Union([
      Type.Literal('user'),
      Type.Literal('api_key'),
      Type.Literal('service_account'),
      Type.Literal('system'),
    ]),
  ),
  actorId: Text('Only events of this actor'),
  subjectType: Text('Only events about subjects of this type'),
  subjectId: Text('Only events about this subject'),
  from: Type.Optional(Type.String({ format: 'date-time', description: 'From this instant (inclusive)' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'Up to this instant (exclusive)' })),
}

export const AuditListQuery = Type.Object(
  {
    ...Filter,
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50, description: 'Page size' })),
    cursor: Type.Optional(Cursor),
  },
  { additionalProperties: false },
)

export const AuditExportQuery = Type.Object(Filter, { additionalProperties: false })
