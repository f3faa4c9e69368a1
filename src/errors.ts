import { type Static, Type } from '@sinclair/typebox'

// The error catalogue: every code the API can answer with, its HTTP status and title.
// Domain code throws `new AppError('CODE')`; one handler (src/http/errors.ts) renders problem+json.
export const ErrorCatalogue = {
  BAD_REQUEST: { status: 400, title: 'Bad request' },
  VALIDATION_FAILED: { status: 400, title: 'Validation failed' },
  MALFORMED_JSON: { status: 400, title: 'Malformed JSON body' },
  INVALID_TOKEN: { status: 400, title: 'Invalid or expired token' },
  WEAK_PASSWORD: { status: 400, title: 'Password does not meet the policy' },
  EMAIL_PROOF_INVALID: { status: 400, title: 'Invalid, expired or used email proof' },
  PASSKEY_REGISTRATION_FAILED: { status: 400, title: 'Passkey registration failed' },
  UNSUPPORTED_CONTENT_TYPE: { status: 400, title: 'Content type not accepted for this resource' },
  AUTHENTICATION_REQUIRED: { status: 401, title: 'Authentication required' },
  INVALID_CREDENTIALS: { status: 401, title: 'Invalid credentials' },
  ACCOUNT_LOCKED: { status: 401, title: 'Account locked' },
  REFRESH_TOKEN_REUSED: { status: 401, title: 'Refresh token reused' },
  REFRESH_TOKEN_INVALID: { status: 401, title: 'Refresh token invalid' },
  OTP_REQUIRED: { status: 401, title: 'One-time password required' },
  INVALID_OTP: { status: 401, title: 'Invalid one-time password' },
  PASSKEY_CHALLENGE_INVALID: { status: 401, title: 'Passkey challenge invalid' },
  PASSKEY_INVALID: { status: 401, title: 'Passkey not accepted' },
  ACCESS_DENIED: { status: 403, title: 'Access denied' },
  INSUFFICIENT_SCOPE: { status: 403, title: 'Insufficient scope' },
  ORGANIZATION_REQUIRED: { status: 403, title: 'Organization required' },
  OTP_REQUIRED_FOR_ROLE: { status: 403, title: 'One-time password required for this role' },
  NOT_FOUND: { status: 404, title: 'Not found' },
  METHOD_NOT_ALLOWED: { status: 405, title: 'Method not allowed' },
  INVALID_TRANSITION: { status: 409, title: 'Invalid transition' },
  UPLOAD_NOT_FOUND: { status: 409, title: 'Upload not found' },
  ACCOUNT_EXISTS: { status: 409, title: 'Account exists' },
  OTP_NOT_SET_UP: { status: 409, title: 'One-time password not set up' },
  OTP_ALREADY_ENABLED: { status: 409, title: 'One-time password already enabled' },
  PASSKEY_EXISTS: { status: 409, title: 'Passkey already registered' },
  LAST_ADMIN: { status: 409, title: 'Last active admin' },
  IDEMPOTENCY_KEY_REUSED: { status: 409, title: 'Idempotency key reused' },
  WEBHOOK_LIMIT_REACHED: { status: 409, title: 'Webhook endpoint limit reached' },
  REQUEST_TIMEOUT: { status: 408, title: 'Request timeout' },
  PAYLOAD_TOO_LARGE: { status: 413, title: 'Payload too large' },
  URI_TOO_LONG: { status: 414, title: 'URI too long' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, title: 'Unsupported media type' },
  RATE_LIMITED: { status: 429, title: 'Too many requests' },
  HEADERS_TOO_LARGE: { status: 431, title: 'Request header fields too large' },
  INTERNAL_ERROR: { status: 500, title: 'Internal error' },
  SERVICE_UNAVAILABLE: { status: 503, title: 'Service unavailable' },
  // Sign-in through OpenID Connect providers, and the identities linked to an account.
  OIDC_STATE_INVALID: { status: 400, title: 'Sign-in flow unknown, expired or used' },
  OIDC_RESPONSE_INVALID: { status: 401, title: "Identity provider's answer refused" },
  OIDC_EMAIL_UNVERIFIED: { status: 403, title: 'Email address not verified by the identity provider' },
  SIGN_UP_DISABLED: { status: 403, title: 'Sign-up is not enabled' },
  REAUTHENTICATION_REQUIRED: { status: 403, title: 'Recent sign-in required' },
  IDENTITY_NOT_LINKED: { status: 409, title: 'Identity not linked to the account' },
  IDENTITY_ALREADY_LINKED: { status: 409, title: 'Identity linked to another account' },
  LAST_SIGN_IN_METHOD: { status: 409, title: 'Last way to sign in' },
} as const satisfies Record<string, { status: number; title: string }>

export type ErrorCode = keyof typeof ErrorCatalogue

export interface AppErrorOptions {
  /** Overrides the catalogue status where one code has two documented statuses (INVALID_OTP). */
  status?: number
  headers?: Record<string, string>
  /** Extension members added to the problem document. */
  extensions?: Record<string, unknown>
  cause?: unknown
}

export class AppError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly headers: Record<string, string>
  readonly extensions: Record<string, unknown>

  constructor(code: ErrorCode, detail?: string, options: AppErrorOptions = {}) {
    super(detail ?? ErrorCatalogue[code].title, { cause: options.cause })
    this.name = 'AppError'
    this.code = code
    this.status = options.status ?? ErrorCatalogue[code].status
    this.headers = options.headers ?? {}
    this.extensions = options.extensions ?? {}
  }
}

/**
 * 400 VALIDATION_FAILED for one value the schema could not judge (a rule of the domain), in the
 * shape the schema validator's answers have: `detail`, and `errors: [{path, message}]`.
 */
export function validationFailed(path: string, message: string, detail = `${path} ${message}`): AppError {
  return new AppError('VALIDATION_FAILED', detail, { extensions: { errors: [{ path, message }] } })
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'

export const Problem = Type.Object(
  {
    type: Type.String({ description: 'URI reference identifying the problem type' }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.Optional(Type.String()),
    code: Type.Unsafe<ErrorCode>({
      type: 'string',
      enum: Object.keys(ErrorCatalogue),
      description: 'Stable machine-readable error code: one of the catalogue',
      examples: ['NOT_FOUND'],
    }),
    errors: Type.Optional(
      Type.Array(Type.Object({ path: Type.String(), message: Type.String() }), {
        description: 'Present on VALIDATION_FAILED: one entry per invalid value',
      }),
    ),
  },
  { $id: 'Problem', title: 'Problem', additionalProperties: true },
)
export type ProblemBody = Static<typeof Problem>

export function problemType(code: ErrorCode): string {
  return `urn:problem:${code.toLowerCase().replaceAll('_', '-')}`
}

export function problemBody(code: ErrorCode, detail?: string, status?: number): ProblemBody {
  const entry = ErrorCatalogue[code]
  return {
    type: problemType(code),
    title: entry.title,
    status: status ?? entry.status,
    ...(detail === undefined ? {} : { detail }),
    code,
  }
}

const STATUS_DESCRIPTIONS: Record<number, string> = {
  400: 'Invalid request',
  401: 'Authentication required or failed',
  403: 'Not allowed',
  404: 'Not found',
  409: 'Conflict with the current state',
  413: 'Payload too large',
  414: 'A path segment is too long',
  415: 'Unsupported media type',
  429: 'Rate limited',
  500: 'Unexpected error',
  503: 'A dependency is unavailable',
}

/** Response schemas for problem statuses, to spread into a route's `response`. */
export function problemResponses(...statuses: number[]) {
  return Object.fromEntries(
    statuses.map((status) => [
      status,
      {
        description: STATUS_DESCRIPTIONS[status] ?? 'Error',
        content: { [PROBLEM_CONTENT_TYPE]: { schema: Type.Ref(Problem) } },
      },
    ]),
  )
}
