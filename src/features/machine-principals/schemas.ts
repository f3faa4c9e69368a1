import { Type } from '@sinclair/typebox'
import { Cursor } from '../../db/paging.ts'
import { SCOPES } from '../../scopes.ts'
import { Uuid } from '../../uuid.ts'

const DateTime = Type.String({ format: 'date-time' })
const OptionalDateTime = (description: string) => Type.Union([DateTime, Type.Null()], { description })

const ScopeName = Type.Union(
  SCOPES.map((scope) => Type.Literal(scope)),
  { description: 'A scope of src/scopes.ts: what the key may call' },
)

export const ApiKeyParams = Type.Object({ id: Uuid })

export const CreateApiKey = Type.Object(
  {
    description: Type.String({
      minLength: 1,
      maxLength: 500,
      pattern: '^[^\\x00-\\x08\\x0b-\\x1f\\x7f]*$',
      description: 'What the key is for, e.g. the integration that holds it',
    }),
    scopes: Type.Array(ScopeName, { minItems: 1, maxItems: SCOPES.length, uniqueItems: true }),
    expiresAt: Type.Optional(
      Type.String({
        format: 'date-time',
        description: 'A future instant; without it the key does not expire',
      }),
    ),
  },
  {
    title: 'CreateApiKey',
    description: 'A new API key of the caller’s organization',
    additionalProperties: false,
  },
)

export const ApiKey = Type.Object(
  {
    id: Uuid,
    keyPrefix: Type.String({ description: 'The prefix and the first 8 characters: safe to display' }),
    description: Type.String(),
    scopes: Type.Array(Type.String()),
    createdAt: DateTime,
    expiresAt: OptionalDateTime('null: the key does not expire'),
    revokedAt: OptionalDateTime('null: not revoked'),
    lastUsedAt: OptionalDateTime('Written once a minute, so up to a minute late; null: never used'),
  },
  {
    $id: 'ApiKey',
    title: 'ApiKey',
    description: 'An API key; never its hash or the raw key',
    additionalProperties: false,
  },
)

export const CreatedApiKey = Type.Object(
  {
    ...ApiKey.properties,
    rawKey: Type.String({
      description: 'The key to send in the API-key header: shown this once, only its hash is stored',
    }),
  },
  {
    title: 'CreatedApiKey',
    description: 'The new key, with the raw key (this answer only)',
    additionalProperties: false,
  },
)

export const ApiKeyListQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Page size' })),
    cursor: Type.Optional(Cursor),
    state: Type.Optional(
      Type.Union([Type.Literal('active'), Type.Literal('revoked'), Type.Literal('expired')], {
        description: 'Only keys in this state now: expired means past its expiry and not revoked',
      }),
    ),
  },
  { additionalProperties: false },
)

export const ApiKeyPage = Type.Object(
  {
    items: Type.Array(Type.Ref('ApiKey')),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'null on the last page' }),
  },
  {
    title: 'ApiKeyPage',
    description: 'A page of the organization’s API keys, newest first',
    additionalProperties: false,
  },
)
