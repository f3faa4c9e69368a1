import { Type } from '@sinclair/typebox'

// The OAuth 2.0 shapes: form bodies in, RFC 6749 / RFC 7662 / RFC 8414 documents out. Their errors
// are `{error, error_description}` (RFC 6749 5.2), not problem+json.

export const OAUTH_ERROR_CODES = [
  'invalid_request',
  'invalid_client',
  'unauthorized_client',
  'unsupported_grant_type',
  'invalid_scope',
  'insufficient_scope',
  'not_found',
  'temporarily_unavailable',
  'server_error',
] as const

export type OAuthErrorCode = (typeof OAUTH_ERROR_CODES)[number]

export const OAuthErrorBody = Type.Object(
  {
    error: Type.Union(OAUTH_ERROR_CODES.map((code) => Type.Literal(code))),
    error_description: Type.Optional(Type.String()),
  },
  { $id: 'OAuthError', title: 'OAuthError', description: 'An OAuth 2.0 error (RFC 6749 section 5.2)' },
)

/** Form fields are strings; unknown parameters are ignored, as RFC 6749 requires. */
export const TokenRequest = Type.Object(
  {
    grant_type: Type.Optional(Type.String({ description: 'client_credentials' })),
    scope: Type.Optional(Type.String({ description: 'Space-separated; a subset of the client’s scopes' })),
    client_id: Type.Optional(Type.String({ description: 'client_secret_post only' })),
    client_secret: Type.Optional(Type.String({ description: 'client_secret_post only' })),
  },
  { additionalProperties: true, title: 'OAuthTokenRequest' },
)

export const TokenResponse = Type.Object(
  {
    access_token: Type.String({ description: 'A JWT access token (RFC 9068), service audience' }),
    token_type: Type.Literal('Bearer'),
    expires_in: Type.Integer(),
    scope: Type.String({ description: 'The granted scopes, space-separated' }),
  },
  {
    title: 'OAuthTokenResponse',
    description: 'The access token (RFC 6749 section 5.1); Cache-Control: no-store',
  },
)

export const IntrospectionRequest = Type.Object(
  {
    token: Type.Optional(Type.String()),
    token_type_hint: Type.Optional(
      Type.String({ description: 'Ignored: every token is a JWT access token' }),
    ),
    client_id: Type.Optional(Type.String()),
    client_secret: Type.Optional(Type.String()),
  },
  { additionalProperties: true, title: 'OAuthIntrospectionRequest' },
)

export const IntrospectionResponse = Type.Object(
  {
    active: Type.Boolean(),
    sub: Type.Optional(Type.String()),
    client_id: Type.Optional(Type.String()),
    scope: Type.Optional(Type.String()),
    exp: Type.Optional(Type.Integer()),
    iat: Type.Optional(Type.Integer()),
    iss: Type.Optional(Type.String()),
    aud: Type.Optional(Type.String()),
    jti: Type.Optional(Type.String()),
    token_type: Type.Optional(Type.Literal('Bearer')),
    org: Type.Optional(Type.String({ description: 'The organization of a user’s token' })),
  },
  {
    title: 'OAuthIntrospectionResponse',
    description: 'What the token is (RFC 7662); only `active` when it is expired, revoked or unreadable',
  },
)

const PublicJwk = Type.Object(
  {
    kty: Type.String(),
    crv: Type.String(),
    x: Type.String(),
    y: Type.Optional(Type.String()),
    kid: Type.String(),
    alg: Type.String(),
    use: Type.Literal('sig'),
  },
  { additionalProperties: false },
)

export const JwkSet = Type.Object(
  { keys: Type.Array(PublicJwk) },
  { title: 'JwkSet', description: 'The public keys that verify access tokens; empty under HS256' },
)

export const ServerMetadata = Type.Object(
  {
    issuer: Type.String(),
    token_endpoint: Type.String(),
    jwks_uri: Type.String(),
    introspection_endpoint: Type.String(),
    grant_types_supported: Type.Array(Type.String()),
    token_endpoint_auth_methods_supported: Type.Array(Type.String()),
    introspection_endpoint_auth_methods_supported: Type.Array(Type.String()),
    scopes_supported: Type.Array(Type.String()),
    response_types_supported: Type.Array(Type.String()),
    id_token_signing_alg_values_supported: Type.Optional(Type.Array(Type.String())),
    subject_types_supported: Type.Optional(Type.Array(Type.String())),
  },
  { title: 'OAuthServerMetadata', description: 'Authorization server metadata (RFC 8414)' },
)
