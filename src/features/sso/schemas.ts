import { Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'

const DateTime = Type.String({ format: 'date-time' })
const Name = Type.String({ maxLength: 200, pattern: '^[^\\x00-\\x1f\\x7f]*$' })
const Issuer = Type.String({
  minLength: 1,
  maxLength: 2000,
  description:
    "The identity provider's issuer (its discovery document is `<issuer>/.well-known/openid-configuration`): " +
    'https; http only on a loopback address under the development profile',
})
const ClientId = Type.String({ minLength: 1, maxLength: 500 })
const ClientSecret = Type.String({
  minLength: 1,
  maxLength: 2000,
  description: 'Stored sealed; never answered',
})
const DomainName = Type.String({ minLength: 1, maxLength: 253, examples: ['example.org'] })

export const ConnectionParams = Type.Object({ id: Uuid })
export const DomainParams = Type.Object({ domain: DomainName })

export const CreateSsoConnection = Type.Object(
  {
    name: Type.Optional(Name),
    issuer: Issuer,
    clientId: ClientId,
    clientSecret: ClientSecret,
    enabled: Type.Optional(Type.Boolean({ default: true, description: 'At most one connection is enabled' })),
  },
  { title: 'CreateSsoConnection', additionalProperties: false },
)

export const UpdateSsoConnection = Type.Object(
  {
    name: Type.Optional(Name),
    issuer: Type.Optional(Issuer),
    clientId: Type.Optional(ClientId),
    clientSecret: Type.Optional(ClientSecret),
    enabled: Type.Optional(Type.Boolean()),
  },
  { title: 'UpdateSsoConnection', additionalProperties: false, minProperties: 1 },
)

export const SsoConnection = Type.Object(
  {
    id: Uuid,
    name: Type.String(),
    issuer: Type.String(),
    clientId: Type.String(),
    enabled: Type.Boolean(),
    createdAt: DateTime,
    updatedAt: DateTime,
  },
  {
    $id: 'SsoConnection',
    title: 'SsoConnection',
    description:
      "An OpenID Connect connection to the organization's identity provider (its secret is never shown)",
    additionalProperties: false,
  },
)

export const SsoConnectionList = Type.Object(
  { items: Type.Array(Type.Ref('SsoConnection')) },
  {
    title: 'SsoConnectionList',
    description: 'The organization’s connections, oldest first',
    additionalProperties: false,
  },
)

export const AddSsoDomain = Type.Object(
  { domain: DomainName },
  {
    title: 'AddSsoDomain',
    description: 'An email domain to claim: not a public suffix, not a free email provider’s',
    additionalProperties: false,
  },
)

export const SsoDomain = Type.Object(
  {
    domain: Type.String(),
    status: Type.Union([Type.Literal('pending'), Type.Literal('verified')], {
      description: 'verified once a lookup saw the TXT record; pending until then',
    }),
    txtRecord: Type.Object(
      {
        name: Type.String({ description: '`_platform-verification.<domain>`' }),
        value: Type.String({ description: 'The random value the TXT record must hold' }),
      },
      { additionalProperties: false, description: 'The DNS record to publish' },
    ),
    verifiedAt: Type.Union([DateTime, Type.Null()]),
    checkedAt: Type.Union([DateTime, Type.Null()], { description: 'The last lookup' }),
    createdAt: DateTime,
  },
  {
    $id: 'SsoDomain',
    title: 'SsoDomain',
    description: 'An email domain the organization claims',
    additionalProperties: false,
  },
)

export const SsoDomainList = Type.Object(
  { items: Type.Array(Type.Ref('SsoDomain')) },
  { title: 'SsoDomainList', description: 'The organization’s domains, by name', additionalProperties: false },
)

export const SsoStart = Type.Object(
  { email: Type.String({ minLength: 3, maxLength: 320 }) },
  { title: 'SsoStart', description: 'The address the person signs in with', additionalProperties: false },
)

export const SsoRedirect = Type.Object(
  {
    redirectUrl: Type.String({
      description: "The identity provider's authorization URL: navigate the browser there",
    }),
  },
  {
    title: 'SsoRedirect',
    description: "Where to send the browser: the connection's identity provider",
    additionalProperties: false,
  },
)
