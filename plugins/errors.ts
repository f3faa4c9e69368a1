// Renders every error as application/problem+json (decisions 5) and registers the shared
// `Problem` schema; needs nothing. Internal details (stack, SQL, messages of unexpected errors)
// never reach a response; they are logged with the request id instead.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { isDatabaseUnavailable } from '../src/db/database.ts'
import {
  AppError,
  type ErrorCode,
  PROBLEM_CONTENT_TYPE,
  Problem,
  problemBody,
  problemResponses,
} from '../src/errors.ts'

interface ValidationIssue {
  instancePath?: string
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
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
  503: 'SERVICE_UNAVAILABLE',
}

const MALFORMED_BODY_CODES = new Set(['FST_ERR_CTP_EMPTY_JSON_BODY', 'FST_ERR_CTP_INVALID_JSON_BODY'])

const isInvalidData = (error: FastifyError) =>
  typeof (error as { code?: unknown }).code === 'string' &&
  /^22[0-9A-Z]{3}$/.test(error.code) &&
  'severity' in error

function validationErrors(error: FastifyError): { path: string; message: string }[] {
  const context = error.validationContext ?? 'body'
  return ((error.validation ?? []) as ValidationIssue[]).map((issue) => {
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

function classify(error: FastifyError): Rendered {
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
  if (isInvalidData(error)) {
    // SQLSTATE class 22 (data exception): a value the database cannot store, such as a NUL character.
    return { code: 'BAD_REQUEST', status: 400, detail: 'The request contains a value that cannot be stored' }
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

export function sendProblem(reply: FastifyReply, rendered: Rendered) {
  const body = { ...problemBody(rendered.code, rendered.detail, rendered.status), ...rendered.extensions }
  return reply
    .code(rendered.status)
    .headers(rendered.headers ?? {})
    .type(PROBLEM_CONTENT_TYPE)
    .send(body)
}

async function errorsPlugin(app: FastifyInstance) {
  app.addSchema(Problem)

  // Every route documents the problems any route can answer with, so no route has to repeat them.
  app.addHook('onRoute', (route) => {
    const schema = route.schema
    if (!schema || (schema as { hide?: boolean }).hide) return
    const validatesInput = Boolean(schema.body || schema.querystring || schema.params || schema.headers)
    const defaults = problemResponses(...(validatesInput ? [400, 500] : [500]))
    schema.response = { ...defaults, ...(schema.response as object | undefined) }
  })

  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const rendered = classify(error)
    if (rendered.status >= 500) request.log.error({ err: error }, 'request failed')
    else request.log.info({ code: rendered.code, status: rendered.status }, 'request rejected')
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
