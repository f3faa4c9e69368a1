import { Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'
import { PasskeyAssertionBody } from '../sessions/index.ts'

const DateTime = Type.String({ format: 'date-time' })

export const ProviderId = Type.String({
  pattern: '^[a-z0-9][a-z0-9-]{0,62}$',
  description: 'The provider id',
})

export const ProviderParams = Type.Object({ providerId: ProviderId }, { additionalProperties: false })

export const ProviderList = Type.Object(
  {
    items: Type.Array(
      Type.Object(
        {
          id: ProviderId,
          name: Type.String({ description: 'What the sign-in button says: "Continue with <name>"' }),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false, title: 'OidcProviderList', description: 'The providers' },
)

/** The query a provider's answer comes back with; everything is checked by the flow, not here. */
export const CallbackQuery = Type.Object(
  {
    code: Type.Optional(Type.String({ maxLength: 4096 })),
    state: Type.Optional(Type.String({ maxLength: 512 })),
    iss: Type.Optional(Type.String({ maxLength: 2048 })),
    error: Type.Optional(Type.String({ maxLength: 256 })),
    error_description: Type.Optional(Type.String({ maxLength: 2048 })),
    error_uri: Type.Optional(Type.String({ maxLength: 2048 })),
    session_state: Type.Optional(Type.String({ maxLength: 2048 })),
  },
  { additionalProperties: true },
)

export const Redirect = (description: string) => ({
  type: 'null',
  description,
  headers: {
    Location: { type: 'string', description: 'Where the browser goes next' },
    'Set-Cookie': {
      type: 'string',
      description: 'The flow cookie (httpOnly, path /api/auth/oidc), or the session cookies',
    },
  },
})

export const SecondFactorBody = Type.Object(
  {
    otpCode: Type.Optional(Type.String({ maxLength: 64, description: 'TOTP code or unused backup code' })),
    passkey: Type.Optional(PasskeyAssertionBody),
  },
  { additionalProperties: false, title: 'OidcSecondFactor' },
)

export const LinkRequest = Type.Object(
  { provider: ProviderId },
  { additionalProperties: false, title: 'IdentityLinkRequest' },
)

export const LinkStart = Type.Object(
  {
    redirectUrl: Type.String({ description: "The provider's authorization URL: navigate the browser to it" }),
  },
  { additionalProperties: false, title: 'IdentityLinkStart', description: 'Where to send the browser' },
)

export const IdentityRecord = Type.Object(
  {
    id: Uuid,
    provider: Type.String({ description: 'The provider reference: platform:<id>, or connection:<id>' }),
    providerName: Type.Union([Type.String(), Type.Null()]),
    issuer: Type.String(),
    email: Type.Union([Type.String(), Type.Null()], {
      description: 'The address the provider gave at link time',
    }),
    createdAt: DateTime,
    lastUsedAt: Type.Union([DateTime, Type.Null()]),
  },
  { additionalProperties: false, title: 'LinkedIdentity' },
)

export const IdentityList = Type.Object(
  { items: Type.Array(IdentityRecord) },
  { additionalProperties: false, title: 'LinkedIdentityList', description: 'The linked identities' },
)

export const IdentityParams = Type.Object({ identityId: Uuid }, { additionalProperties: false })
