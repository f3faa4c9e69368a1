import { Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'
import { SIGN_IN_METHODS } from './service.ts'

const DateTime = Type.String({ format: 'date-time' })
/** Text looked up in the database: no control characters (PostgreSQL text refuses NUL). */
const NO_CONTROLS = '^[^\\x00-\\x1f\\x7f]+$'

const Base64Url = (maxLength: number) => Type.String({ pattern: '^[A-Za-z0-9_-]+$', maxLength })

/** A passkey's signed answer to an authentication challenge, as `startAuthentication` returns it. */
export const AuthenticationResponse = Type.Object(
  {
    id: Base64Url(1024),
    rawId: Base64Url(1024),
    type: Type.Literal('public-key'),
    response: Type.Object(
      {
        clientDataJSON: Base64Url(8192),
        authenticatorData: Base64Url(8192),
        // Post-quantum signatures (ML-DSA) run to several kilobytes.
        signature: Base64Url(8192),
        userHandle: Type.Optional(Base64Url(256)),
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
    title: 'PasskeyAuthenticationResponse',
    description: 'The authenticator assertion (WebAuthn AuthenticationResponseJSON)',
  },
)

/** A passkey assertion: the challenge it answers and the authenticator's response. */
export const PasskeyAssertionBody = Type.Object(
  { challengeId: Uuid, response: AuthenticationResponse },
  { additionalProperties: false, title: 'PasskeyAssertion' },
)

export const LoginRequest = Type.Object(
  {
    username: Type.String({
      minLength: 1,
      maxLength: 320,
      pattern: NO_CONTROLS,
      description: 'The account email',
    }),
    password: Type.String({ minLength: 1, maxLength: 1024 }),
    otpCode: Type.Optional(
      Type.String({
        maxLength: 64,
        description: 'TOTP code or unused backup code, when the account has OTP on',
      }),
    ),
    passkey: Type.Optional(
      Type.Object(
        { challengeId: Uuid, response: AuthenticationResponse },
        {
          additionalProperties: false,
          description:
            'In place of otpCode: a passkey of the account answering a challenge from POST /api/auth/passkeys/authentication/options',
        },
      ),
    ),
  },
  {
    additionalProperties: false,
    $id: 'LoginRequest',
    title: 'LoginRequest',
    description: 'Credentials, and the second factor when the account has one',
  },
)

export const SessionResponse = Type.Object(
  { userId: Uuid, organizationId: Uuid, sessionId: Uuid },
  {
    $id: 'SessionResponse',
    title: 'SessionResponse',
    description: 'Who is signed in; the tokens travel only in httpOnly cookies',
  },
)

export const SessionItem = Type.Object(
  {
    sessionId: Uuid,
    createdAt: DateTime,
    lastUsedAt: DateTime,
    expiresAt: DateTime,
    userAgent: Type.Union([Type.String(), Type.Null()]),
    ipAddress: Type.Union([Type.String(), Type.Null()]),
    signInMethod: Type.Union([...SIGN_IN_METHODS.map((method) => Type.Literal(method)), Type.Null()], {
      description: 'The factors the session was signed in with; null for sessions older than this field',
    }),
    current: Type.Boolean({ description: 'True for the session of the calling access token' }),
    impersonatorId: Type.Union([Uuid, Type.Null()], {
      description:
        'The organization admin holding this session as the user (impersonation); null for your own',
    }),
  },
  { $id: 'SessionItem', title: 'SessionItem', description: 'An active session of the signed-in user' },
)

export const SessionList = Type.Array(Type.Ref(SessionItem), {
  $id: 'SessionList',
  title: 'SessionList',
  description: "The user's active sessions, most recently used first",
})

export const SessionParams = Type.Object({ sessionId: Uuid })

export const NoContent = Type.Null({ description: 'No content' })

export const ServiceTokenRequest = Type.Object(
  {
    clientId: Type.String({ minLength: 1, maxLength: 100, pattern: NO_CONTROLS }),
    clientSecret: Type.String({ minLength: 1, maxLength: 256 }),
  },
  {
    additionalProperties: false,
    $id: 'ServiceTokenRequest',
    title: 'ServiceTokenRequest',
    description: 'Client credentials of a service account',
  },
)

export const ServiceTokenResponse = Type.Object(
  {
    accessToken: Type.String({ description: 'Signed JWT (service audience); send as Authorization: Bearer' }),
    tokenType: Type.Literal('Bearer'),
    expiresInSeconds: Type.Integer({ description: 'The access-token lifetime in seconds' }),
  },
  { $id: 'ServiceTokenResponse', title: 'ServiceTokenResponse', description: 'A service access token' },
)
