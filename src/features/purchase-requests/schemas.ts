import { type Static, Type } from '@sinclair/typebox'
import { Cursor } from '../../db/paging.ts'
import { Uuid } from '../../uuid.ts'
import { PurchaseRequestStatuses } from './workflow.ts'

const DateTime = Type.String({ format: 'date-time' })
const Status = Type.Union(
  PurchaseRequestStatuses.map((s) => Type.Literal(s)),
  { description: 'DRAFT -submit-> SUBMITTED -approve-> APPROVED' },
)

export const PurchaseRequest = Type.Object(
  {
    id: Uuid,
    organizationId: Uuid,
    createdBy: Type.String({ description: 'Principal id of the creator (a user or an API key)' }),
    title: Type.String({ minLength: 1, maxLength: 255 }),
    status: Status,
    createdAt: DateTime,
    updatedAt: DateTime,
  },
  {
    $id: 'PurchaseRequest',
    title: 'PurchaseRequest',
    description: 'A purchase request (the example resource)',
  },
)
export type PurchaseRequestBody = Static<typeof PurchaseRequest>

export const CreatePurchaseRequest = Type.Object(
  { title: Type.String({ minLength: 1, maxLength: 255 }) },
  {
    additionalProperties: false,
    $id: 'CreatePurchaseRequest',
    title: 'CreatePurchaseRequest',
    description: 'A new DRAFT purchase request',
  },
)

export const PurchaseRequestParams = Type.Object({ id: Uuid })

export const ListQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'Page size' })),
    cursor: Type.Optional(Cursor),
    status: Type.Optional(Status),
  },
  { additionalProperties: false },
)

export const PurchaseRequestPage = Type.Object(
  {
    items: Type.Array(Type.Ref(PurchaseRequest)),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'null on the last page' }),
  },
  {
    $id: 'PurchaseRequestPage',
    title: 'PurchaseRequestPage',
    description: 'A page of purchase requests, newest first',
  },
)

export const HistoryEntry = Type.Object(
  {
    action: Type.String(),
    fromStatus: Status,
    toStatus: Status,
    actorId: Type.String(),
    occurredAt: DateTime,
  },
  {
    $id: 'PurchaseRequestHistoryEntry',
    title: 'PurchaseRequestHistoryEntry',
    description: 'One transition of a purchase request (an audit row)',
  },
)

export const History = Type.Object(
  { items: Type.Array(Type.Ref(HistoryEntry)) },
  {
    $id: 'PurchaseRequestHistory',
    title: 'PurchaseRequestHistory',
    description: 'The transitions of a purchase request, oldest first',
  },
)
