import { Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'

const DateTime = Type.String({ format: 'date-time' })
const Base64Url = (maxLength: number) => Type.String({ pattern: '^[A-Za-z0-9_-]+$', maxLength })
/** A name its owner chose: no control characters. */
const PasskeyName = Type.String({ minLength: 1, maxLength: 100, pattern: '^[^\\x00-\\x1f\\x7f]+$' })
/** Objects of the WebAuthn options whose members browsers define and may extend. */
const Open = (properties: Parameters<typeof Type.Object>[0], description?: string) =>
  Type.Object(properties, { additionalProperties: true, ...(description ? { description } : {}) })

export const PasskeyRecord = Type.Object(
  {
    id: Uuid,
    name: Type.String(),
    deviceType: Type.Union([Type.Literal('singleDevice'), Type.Literal('multiDevice')], {
      description: 'multiDevice: a synced passkey; singleDevice: bound to one authenticator',
    }),
    backedUp: Type.Boolean(),
    transports: Type.Array(Type.String()),
    aaguid: Type.String({ description: 'The authenticator model (zeros when it does not say)' }),
    createdAt: DateTime,
    lastUsedAt: Type.Union([DateTime, Type.Null()]),
  },
  { title: 'PasskeyRecord', description: 'A passkey of the signed-in user', additionalProperties: false },
)

export const PasskeyList = Type.Object(
  { items: Type.Array(PasskeyRecord) },
  {
    title: 'PasskeyList',
    description: 'The signed-in user’s passkeys, oldest first',
    additionalProperties: false,
  },
)

export const PasskeyParams = Type.Object({ passkeyId: Uuid }, { additionalProperties: false })

const CredentialDescriptor = Open({
  id: Base64Url(1024),
  type: Type.String(),
  transports: Type.Optional(Type.Array(Type.String())),
})

export const CreationOptions = Open(
  {
    rp: Open({ name: Type.String(), id: Type.Optional(Type.String()) }),
    user: Open({ id: Type.String(), name: Type.String(), displayName: Type.String() }),
    challenge: Type.String(),
    pubKeyCredParams: Type.Array(Open({ alg: Type.Integer(), type: Type.String() })),
    timeout: Type.Optional(Type.Integer()),
    excludeCredentials: Type.Optional(Type.Array(CredentialDescriptor)),
    authenticatorSelection: Type.Optional(Open({})),
    hints: Type.Optional(Type.Array(Type.String())),
    attestation: Type.Optional(Type.String()),
    extensions: Type.Optional(Open({})),
  },
  'WebAuthn PublicKeyCredentialCreationOptionsJSON: give it to startRegistration (@simplewebauthn/browser)',
)

export const RegistrationRequest = Type.Object(
  {
    response: Type.Object(
      {
        id: Base64Url(1024),
        rawId: Base64Url(1024),
        type: Type.Literal('public-key'),
        response: Type.Object(
          {
            clientDataJSON: Base64Url(8192),
            attestationObject: Base64Url(65536),
            authenticatorData: Type.Optional(Base64Url(65536)),
            transports: Type.Optional(Type.Array(Type.String({ maxLength: 32 }), { maxItems: 16 })),
            publicKeyAlgorithm: Type.Optional(Type.Integer()),
            publicKey: Type.Optional(Base64Url(65536)),
          },
          { additionalProperties: false },
        ),
        authenticatorAttachment: Type.Optional(
          Type.Union([Type.Literal('platform'), Type.Literal('cross-platform')]),
        ),
        clientExtensionResults: Type.Object({}, { additionalProperties: true }),
      },
      {
        additionalProperties: false,
        description: 'What startRegistration returned (RegistrationResponseJSON)',
      },
    ),
    name: Type.Optional(PasskeyName),
  },
  { additionalProperties: false, title: 'PasskeyRegistration' },
)

export const RenameRequest = Type.Object(
  { name: PasskeyName },
  { additionalProperties: false, title: 'PasskeyRename' },
)

export const AuthenticationOptionsRequest = Type.Object(
  {
    username: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 320,
        pattern: '^[^\\x00-\\x1f\\x7f]+$',
        description: 'The account email, for a username-first sign-in; none: any passkey (usernameless)',
      }),
    ),
  },
  { additionalProperties: false, title: 'PasskeyAuthenticationOptionsRequest' },
)

export const AuthenticationOptions = Type.Object(
  {
    challengeId: Uuid,
    options: Open(
      {
        challenge: Type.String(),
        timeout: Type.Optional(Type.Integer()),
        rpId: Type.Optional(Type.String()),
        allowCredentials: Type.Optional(Type.Array(CredentialDescriptor)),
        userVerification: Type.Optional(Type.String()),
        hints: Type.Optional(Type.Array(Type.String())),
        extensions: Type.Optional(Open({})),
      },
      'WebAuthn PublicKeyCredentialRequestOptionsJSON: give it to startAuthentication (@simplewebauthn/browser)',
    ),
  },
  {
    additionalProperties: false,
    title: 'PasskeyAuthenticationOptions',
    description: 'The options of a passkey sign-in and the id of their challenge',
  },
)
