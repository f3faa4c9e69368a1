// The OAuth 2.0 endpoints for machines: the token endpoint, introspection, the JWK set and the
// discovery documents. Their bodies are forms and their errors RFC 6749's `{error,
// error_description}`: this scope parses forms and renders every error of its routes that way.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../../errors.ts'
import { enforceRateLimits, RATE_LIMIT_WINDOWS } from '../../http/rate-limit.ts'
import {
  IntrospectionRequest,
  IntrospectionResponse,
  JwkSet,
  OAuthErrorBody,
  ServerMetadata,
  TokenRequest,
  TokenResponse,
} from './schemas.ts'
import { type ClientCredentials, INTROSPECT_SCOPE, OAuthError, OAuthServer } from './service.ts'

const FORM = 'application/x-www-form-urlencoded'
/** Metadata and keys change rarely; a rotated key is published well before it signs (see the docs). */
const PUBLIC_CACHE = 'public, max-age=300'

const oauthError = (description: string) => ({
  description,
  content: { 'application/json': { schema: OAuthErrorBody } },
})

/** The answers of a failed client authentication, a request over the allowance and a dependency down. */
const refusals = (unauthenticated: string, limited: string) => ({
  401: oauthError(unauthenticated),
  429: oauthError(`temporarily_unavailable: ${limited} (Retry-After)`),
  503: oauthError('temporarily_unavailable'),
})

/** RFC 6749 2.3.1: Basic credentials are form-encoded before they are base64-encoded. */
function formDecode(text: string): string {
  return decodeURIComponent(text.replaceAll('+', ' '))
}

/**
 * The client's credentials from `Authorization: Basic` or the form (never both), or null when the
 * request carries none.
 */
function clientCredentials(
  request: FastifyRequest,
  body: Record<string, string | undefined>,
): ClientCredentials | null {
  const authorization = request.headers.authorization
  const inBody = body.client_secret !== undefined
  if (authorization !== undefined) {
    const basic = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i.exec(authorization)?.[1]
    if (!basic) {
      if (/^Bearer /i.test(authorization)) return null
      throw new OAuthError(
        'invalid_client',
        'The Authorization header is not Basic client credentials',
        401,
        {
          'www-authenticate': 'Basic realm="oauth2", charset="UTF-8"',
        },
      )
    }
    if (inBody) throw new OAuthError('invalid_request', 'Use one client authentication method, not two')
    const decoded = Buffer.from(basic, 'base64').toString('utf8')
    const colon = decoded.indexOf(':')
    let clientId: string
    let clientSecret: string
    try {
      clientId = formDecode(decoded.slice(0, colon))
      clientSecret = formDecode(decoded.slice(colon + 1))
    } catch {
      clientId = ''
      clientSecret = ''
    }
    if (colon < 0 || clientId === '') {
      throw new OAuthError('invalid_client', 'The Basic credentials are malformed', 401, {
        'www-authenticate': 'Basic realm="oauth2", charset="UTF-8"',
      })
    }
    if (body.client_id !== undefined && body.client_id !== clientId) {
      throw new OAuthError('invalid_request', 'client_id differs from the client authenticated')
    }
    return { clientId, clientSecret, method: 'client_secret_basic' }
  }
  if (body.client_id !== undefined && inBody) {
    return {
      clientId: body.client_id,
      clientSecret: body.client_secret as string,
      method: 'client_secret_post',
    }
  }
  return null
}

/** A form post: a JSON body or any other content type is invalid_request. */
function formBody(request: FastifyRequest): Record<string, string | undefined> {
  const type = (request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase()
  if (type !== FORM) throw new OAuthError('invalid_request', `The body must be ${FORM}`)
  return request.body as Record<string, string | undefined>
}

function sendOAuthError(reply: FastifyReply, error: OAuthError) {
  return reply
    .code(error.status)
    .headers({ 'cache-control': 'no-store', pragma: 'no-cache', ...error.headers })
    .type('application/json')
    .send({ error: error.error, error_description: error.message })
}

/** Any error of this scope's routes, in RFC 6749's shape. */
function asOAuthError(error: FastifyError): OAuthError {
  if (error instanceof OAuthError) return error
  if (error instanceof AppError && error.code === 'RATE_LIMITED') {
    return new OAuthError('temporarily_unavailable', 'Too many requests; try again later', 429, error.headers)
  }
  const status = error.statusCode ?? 500
  if (status === 413) return new OAuthError('invalid_request', 'The request body is too large', 413)
  if (status >= 400 && status < 500) return new OAuthError('invalid_request', 'The request is malformed')
  if (status === 503) return new OAuthError('temporarily_unavailable', 'A dependency is unavailable', 503)
  return new OAuthError('server_error', 'An unexpected error occurred', 500)
}

const oauthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, clock, db } = app
  const { tokens, serviceAccounts, sessionGate } = app.services
  const server = new OAuthServer({ config, tokens, serviceAccounts, sessionGate })
  app.addSchema(OAuthErrorBody)

  // Forms only here (the rest of the API takes JSON alone); a parameter given twice is refused.
  app.addContentTypeParser(FORM, { parseAs: 'string', bodyLimit: 16 * 1024 }, (_request, text, done) => {
    const params = new URLSearchParams(text as string)
    const body: Record<string, string> = {}
    for (const [name, value] of params) {
      if (name in body) return done(new OAuthError('invalid_request', `${name} is given more than once`))
      body[name] = value
    }
    done(null, body)
  })

  // The documented answers are this scope's own: its errors are never problem+json.
  app.addHook('onRoute', (route) => {
    const response = (route.schema?.response ?? {}) as Record<string, unknown>
    delete response['415']
    for (const status of ['400', '413', '500']) {
      const documented = response[status] as { content?: Record<string, unknown> } | undefined
      if (documented && !documented.content?.['application/json'])
        response[status] = oauthError('An OAuth 2.0 error')
    }
  })

  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const rendered = asOAuthError(error)
    if (rendered.status >= 500) request.log.error({ err: error }, 'request failed')
    else request.log.info({ error: rendered.error, status: rendered.status }, 'oauth request rejected')
    return sendOAuthError(reply, rendered)
  })

  // The JSON endpoint's allowances and counters: one budget per address and per client id however
  // a client asks for its token.
  const limits = (request: FastifyRequest, clientId: string | null) => {
    const max = config.auth.rateLimit.serviceTokenPerMinute
    const windowSeconds = RATE_LIMIT_WINDOWS.minute
    return [
      { key: `service-token:ip:${request.ip}`, max, windowSeconds },
      ...(clientId === null ? [] : [{ key: `service-token:client:${clientId}`, max, windowSeconds }]),
    ]
  }

  app.post(
    '/oauth2/token',
    {
      config: { public: true },
      schema: {
        tags: ['oauth2'],
        operationId: 'oauth2Token',
        summary: 'OAuth 2.0 client-credentials grant (RFC 6749 4.4) for service accounts',
        description:
          'Client authentication by HTTP Basic (client_secret_basic, credentials form-encoded) or in the ' +
          'form (client_secret_post), never both. The token is the one POST /api/auth/service-token ' +
          'issues, with the requested scopes (default: all of the client’s).',
        consumes: [FORM],
        body: TokenRequest,
        response: {
          200: TokenResponse,
          400: oauthError(
            'invalid_request, unauthorized_client (a disabled client), unsupported_grant_type, invalid_scope',
          ),
          ...refusals(
            'invalid_client; WWW-Authenticate names Basic when Basic was used',
            'too many requests',
          ),
        },
      },
    },
    async (request, reply) => {
      const body = formBody(request)
      const credentials = clientCredentials(request, body)
      if (body.grant_type === undefined) throw new OAuthError('invalid_request', 'grant_type is required')
      await enforceRateLimits(db, clock, limits(request, credentials?.clientId ?? body.client_id ?? null))
      if (!credentials) {
        throw new OAuthError('invalid_client', 'Client authentication is required', 401)
      }
      if (body.grant_type !== 'client_credentials') {
        throw new OAuthError('unsupported_grant_type', 'Only the client_credentials grant is supported')
      }
      const answer = await server.clientCredentials(credentials, body.scope)
      reply.headers({ 'cache-control': 'no-store', pragma: 'no-cache' })
      return answer
    },
  )

  app.post(
    '/oauth2/introspect',
    {
      config: { public: true },
      schema: {
        tags: ['oauth2'],
        operationId: 'oauth2Introspect',
        summary: 'OAuth 2.0 token introspection (RFC 7662), for service accounts holding tokens:introspect',
        description:
          'The caller authenticates as a service account (Basic, form credentials or its bearer token). ' +
          'Expired, revoked or unreadable tokens are {"active": false}.',
        consumes: [FORM],
        body: IntrospectionRequest,
        security: [{ clientBasic: [] }, { bearerAuth: [INTROSPECT_SCOPE] }],
        response: {
          200: IntrospectionResponse,
          400: oauthError('invalid_request'),
          403: oauthError('insufficient_scope: the caller does not hold tokens:introspect'),
          ...refusals(
            'invalid_client: no or failed client authentication',
            'too many failed client authentications',
          ),
        },
      },
    },
    async (request, reply) => {
      const body = formBody(request)
      const credentials = clientCredentials(request, body)
      const principal = request.principal
      if (credentials) {
        try {
          await server.introspectionCaller(credentials)
        } catch (error) {
          // Failed client authentications count against the token endpoint's per-address allowance.
          if (error instanceof OAuthError && error.error === 'invalid_client')
            await enforceRateLimits(db, clock, limits(request, null))
          throw error
        }
      } else if (principal?.type === 'SERVICE_ACCOUNT') {
        if (!principal.scopes.has(INTROSPECT_SCOPE)) {
          throw new OAuthError('insufficient_scope', `Introspection needs the scope ${INTROSPECT_SCOPE}`, 403)
        }
      } else {
        throw new OAuthError('invalid_client', 'Client authentication is required', 401)
      }
      if (body.token === undefined || body.token === '')
        throw new OAuthError('invalid_request', 'token is required')
      reply.headers({ 'cache-control': 'no-store', pragma: 'no-cache' })
      return server.introspect(body.token)
    },
  )

  app.get(
    '/.well-known/jwks.json',
    {
      config: { public: true },
      schema: {
        tags: ['oauth2'],
        operationId: 'jwks',
        summary: 'The public keys that verify access tokens (RFC 7517), current and previous',
        response: { 200: JwkSet },
      },
    },
    async (_request, reply) => {
      reply.header('cache-control', PUBLIC_CACHE)
      return { keys: tokens.jwks() }
    },
  )

  for (const [path, openid] of [
    ['/.well-known/oauth-authorization-server', false],
    ['/.well-known/openid-configuration', true],
  ] as const) {
    app.get(
      path,
      {
        config: { public: true },
        schema: {
          tags: ['oauth2'],
          operationId: openid ? 'openidConfiguration' : 'oauthAuthorizationServer',
          summary: openid
            ? 'OpenID Connect discovery document (the OAuth metadata; no ID tokens are issued)'
            : 'OAuth 2.0 authorization server metadata (RFC 8414)',
          response: {
            200: ServerMetadata,
            404: oauthError('not_found: platform.auth.jwt.issuer is not an http(s) URL'),
          },
        },
      },
      async (_request, reply) => {
        const metadata = server.metadata(openid)
        if (!metadata) {
          throw new OAuthError(
            'not_found',
            'Discovery needs platform.auth.jwt.issuer to be an http(s) URL (RFC 8414)',
            404,
          )
        }
        reply.header('cache-control', PUBLIC_CACHE)
        return metadata
      },
    )
  }
}

export default oauthRoutes
