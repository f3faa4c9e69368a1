// Renders every error as application/problem+json and registers the shared `Problem` schema;
// needs nothing. Internal details (stack, SQL, messages of unexpected errors) never reach a
// response; they are logged with the request id instead. A route a browser navigates to itself may
// name, in its config, where a person's refused navigation goes instead (a redirect with the code).
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { isDatabaseUnavailable, isDataException } from '../db/database.ts'
import {
  AppError,
  ErrorCatalogue,
  type ErrorCode,
  PROBLEM_CONTENT_TYPE,
  Problem,
  problemBody,
  problemResponses,
} from '../errors.ts'
import { isBrowserNavigation } from './navigation.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Whether the credential behind the request's principal is still valid, asked of the database
     * (src/http/auth.ts decorates it). A 403 for a principal whose credential is found dead
     * (revoked on another instance, its notification still on its way) is answered 401 instead.
     */
    credentialStillValid?: (request: FastifyRequest) => Promise<boolean>
  }
  interface FastifyContextConfig {
    /**
     * Where a browser's top-level navigation (src/http/navigation.ts) that this route refuses goes:
     * 302 (no-store) to the URL returned for the refusal's code, in place of a page of problem+json.
     * Programs keep the problem+json; an unexpected failure (500, an outage) is answered as anywhere.
     */
    navigationRefusal?: (request: FastifyRequest, code: ErrorCode) => string
  }
}

interface ValidationIssue {
  instancePath?: string
  schemaPath?: string
  message?: string
  keyword?: string
  params?: Record<string, unknown>
}

const GENERIC_CODES: Record<number, ErrorCode> = {
  400: 'BAD_REQUEST',
  401: 'AUTHENTICATION_REQUIRED',
  403: 'ACCESS_DENIED',
  404: 'NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  408: 'REQUEST_TIMEOUT',
  413: 'PAYLOAD_TOO_LARGE',
  414: 'URI_TOO_LONG',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
  503: 'SERVICE_UNAVAILABLE',
}

const MALFORMED_BODY_CODES = new Set(['FST_ERR_CTP_EMPTY_JSON_BODY', 'FST_ERR_CTP_INVALID_JSON_BODY'])

/**
 * The issues of a union (`anyOf`) as the branch the value came closest to: the branch with the
 * fewest issues (the first of equals), without the other branches' issues nor the union's own
 * "must match a schema in anyOf". A body with a link token and an unknown field is told about the
 * unknown field, not that it also lacks the other branch's address and code.
 */
function closestBranches(issues: ValidationIssue[]): ValidationIssue[] {
  let kept = issues
  for (const union of issues.filter((issue) => issue.keyword === 'anyOf')) {
    const prefix = `${union.schemaPath ?? ''}/`
    const byBranch = new Map<string, ValidationIssue[]>()
    for (const issue of kept) {
      const rest = issue.schemaPath?.startsWith(prefix) ? issue.schemaPath.slice(prefix.length) : undefined
      const branch = rest?.split('/')[0]
      if (branch === undefined) continue
      byBranch.set(branch, [...(byBranch.get(branch) ?? []), issue])
    }
    if (byBranch.size === 0) continue
    const closest = [...byBranch.values()].reduce((best, next) => (next.length < best.length ? next : best))
    kept = kept.filter(
      (issue) => issue !== union && (!issue.schemaPath?.startsWith(prefix) || closest.includes(issue)),
    )
  }
  return kept
}

function validationErrors(error: FastifyError): { path: string; message: string }[] {
  const context = error.validationContext ?? 'body'
  return closestBranches((error.validation ?? []) as ValidationIssue[]).map((issue) => {
    const segments = (issue.instancePath ?? '').split('/').filter(Boolean)
    const missing = issue.params?.missingProperty
    const extra = issue.params?.additionalProperty
    if (typeof missing === 'string') segments.push(missing)
    if (typeof extra === 'string') segments.push(extra)
    const message =
      typeof missing === 'string'
        ? 'is required'
        : typeof extra === 'string'
          ? 'is not an allowed property'
          : (issue.message ?? 'is invalid')
    return { path: [context, ...segments].join('.'), message }
  })
}

interface Rendered {
  code: ErrorCode
  status: number
  detail?: string
  headers?: Record<string, string>
  extensions?: Record<string, unknown>
}

/**
 * A value of the request the database refused as data (SQLSTATE class 22): 400, never 503 or 500,
 * also when a layer on the way up wrapped it as an outage. The detail names no SQL and no value.
 */
const REFUSED_VALUE: Rendered = {
  code: 'VALIDATION_FAILED',
  status: 400,
  detail: 'The request contains a value that cannot be stored',
  extensions: { errors: [{ path: 'request', message: 'contains a value that cannot be stored' }] },
}

function classify(error: FastifyError): Rendered {
  // A deliberate 4xx stands; a 5xx (an AppError or not) caused by a refused value does not.
  const clientError = error instanceof AppError && error.status < 500
  if (!clientError && isDataException(error)) return REFUSED_VALUE
  if (error instanceof AppError) {
    return {
      code: error.code,
      status: error.status,
      detail: error.message,
      headers: error.headers,
      extensions: error.extensions,
    }
  }
  if (error.validation) {
    return {
      code: 'VALIDATION_FAILED',
      status: 400,
      detail: 'The request is not valid',
      extensions: { errors: validationErrors(error) },
    }
  }
  if (MALFORMED_BODY_CODES.has(error.code) || (error.statusCode === 400 && error instanceof SyntaxError)) {
    return { code: 'MALFORMED_JSON', status: 400, detail: 'The request body is not valid JSON' }
  }
  if (isDatabaseUnavailable(error)) {
    return {
      code: 'SERVICE_UNAVAILABLE',
      status: 503,
      detail: 'The database is unavailable',
      headers: { 'retry-after': '5' },
    }
  }
  const status = error.statusCode ?? 500
  if (status >= 400 && status < 500) {
    // Fastify's own client errors carry safe, fixed messages (body too large, bad content type).
    return { code: GENERIC_CODES[status] ?? 'BAD_REQUEST', status, detail: error.message }
  }
  if (status === 503) return { code: 'SERVICE_UNAVAILABLE', status, detail: 'A dependency is unavailable' }
  return { code: 'INTERNAL_ERROR', status: 500, detail: 'An unexpected error occurred' }
}

/**
 * A refusal the route meant (an AppError: a 4xx, or a 503 such as an identity provider out of
 * reach) or a client error of the framework's, as opposed to an unexpected failure: a 500, or an
 * outage no code named.
 */
const isRefusal = (error: FastifyError, rendered: Rendered) =>
  rendered.status < 500 || (error instanceof AppError && rendered.code !== 'INTERNAL_ERROR')

/**
 * Fastify's `frameworkErrors`: the router's own refusals, raised before any route or hook runs (a
 * path that is not valid percent-encoding, a path parameter over `maxParamLength`), rendered from
 * the catalogue like every other answer.
 */
export function frameworkError(error: FastifyError, _request: FastifyRequest, reply: FastifyReply) {
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    return sendProblem(reply, { code: 'URI_TOO_LONG', status: 414, detail: 'A path segment is too long' })
  }
  if (error.code === 'FST_ERR_BAD_URL') {
    return sendProblem(reply, {
      code: 'BAD_REQUEST',
      status: 400,
      detail: 'The request path is not a valid URL',
    })
  }
  return sendProblem(reply, classify(error))
}

/**
 * Fastify's `clientErrorHandler`: requests Node's HTTP parser refuses before Fastify sees them
 * (malformed request line or headers, headers too large, a request that timed out) get a
 * problem+json answer from the catalogue, then the connection is closed.
 */
export function clientError(error: Error & { code?: string }, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return
  const code: ErrorCode =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? 'REQUEST_TIMEOUT'
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? 'HEADERS_TOO_LARGE'
        : 'BAD_REQUEST'
  const body = JSON.stringify(problemBody(code, 'The request could not be parsed'))
  const status = ErrorCatalogue[code].status
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${ErrorCatalogue[code].title}\r\nConnection: close\r\n` +
        `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    )
  }
  socket.destroy(error)
}

export function sendProblem(reply: FastifyReply, rendered: Rendered) {
  const body = { ...problemBody(rendered.code, rendered.detail, rendered.status), ...rendered.extensions }
  return reply
    .code(rendered.status)
    .headers(rendered.headers ?? {})
    .type(PROBLEM_CONTENT_TYPE)
    .send(body)
}

const CREATED_LOCATION = {
  type: 'string',
  format: 'uri-reference',
  description: 'The path of the created resource',
}

async function errorsPlugin(app: FastifyInstance) {
  app.addSchema(Problem)

  // Every route documents the problems the framework and the global hooks can answer with, derived
  // here from the route itself (as its `security` is from its config), so no route author has to
  // remember them: 400 (a malformed path or input), 414 (a path segment over the router's limit),
  // 500; for methods that can carry a body (DELETE too), 413 and 415; for a protected route, 401 and 403 (the guard); for /api routes,
  // which all reach the database, 503. A 201 documents its Location header.
  app.addHook('onRoute', (route) => {
    const schema = route.schema
    if (!schema || (schema as { hide?: boolean }).hide) return
    const config = (route.config ?? {}) as { public?: boolean }
    const statuses = [400, 414, 500]
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    // Fastify parses a body on DELETE as well when one is sent (the fuzzer found an undocumented 415).
    if (methods.some((method) => ['POST', 'PUT', 'PATCH', 'DELETE'].includes(method))) statuses.push(413, 415)
    if (!config.public) statuses.push(401, 403)
    if (route.url.startsWith('/api/')) statuses.push(503)
    const response: Record<string, unknown> = {
      ...problemResponses(...statuses),
      ...(schema.response as object | undefined),
    }
    // A 201 names what it created: the document says so for every one.
    const created = response['201'] as Record<string, unknown> | undefined
    if (created && !('content' in created)) {
      response['201'] = {
        description: (created.description as string | undefined) ?? 'Created',
        headers: { Location: CREATED_LOCATION },
        content: { 'application/json': { schema: created } },
      }
    }
    schema.response = response
  })

  app.setErrorHandler(async (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    let rendered = classify(error)
    // A dead credential is told so (401), never that it lacks a permission (403): a principal
    // resolved from an instance's cache may be revoked by now, its tuples already gone.
    if (rendered.status === 403 && request.principal && app.credentialStillValid) {
      const valid = await app.credentialStillValid(request).catch(() => true)
      if (!valid)
        rendered = classify(new AppError('AUTHENTICATION_REQUIRED', 'The credential is no longer valid'))
    }
    if (rendered.status >= 500) request.log.error({ err: error }, 'request failed')
    else request.log.info({ code: rendered.code, status: rendered.status }, 'request rejected')
    const navigationRefusal = request.routeOptions.config.navigationRefusal
    if (navigationRefusal && isRefusal(error, rendered) && isBrowserNavigation(request)) {
      return reply
        .header('cache-control', 'no-store')
        .redirect(navigationRefusal(request, rendered.code), 302)
    }
    return sendProblem(reply, rendered)
  })

  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, {
      code: 'NOT_FOUND',
      status: 404,
      detail: `No route for ${request.method} ${request.url.split('?')[0]}`,
    }),
  )
}

export default fp(errorsPlugin, { name: 'errors', fastify: '5.x' })
