import type { FastifyRequest } from 'fastify'
import type { LoggerOptions } from 'pino'

// Pino options for every process of the service. Requests are logged without headers; credential
// fields are redacted at the top level of a log object and under `body`, `query` and `input`.
// Redaction uses exact paths on purpose: wildcard paths (`*.password`) cost half the service's
// throughput. So code never logs a whole request body or an arbitrary nested object; it logs
// named fields, or puts a payload under one of those keys.

const SENSITIVE_KEYS = [
  'password',
  'newPassword',
  'currentPassword',
  'token',
  'accessToken',
  'refreshToken',
  'clientSecret',
  'secret',
  'secretAccessKey',
  'rawKey',
  'otpCode',
  'backupCodes',
  'apiToken',
  'client_secret',
  'access_token',
]

const SENSITIVE_QUERY = /^(token|code|key|secret|password|access_token|refresh_token|api_key|client_secret)$/i

export function redactUrl(url: string): string {
  const queryStart = url.indexOf('?')
  if (queryStart < 0) return url
  const params = new URLSearchParams(url.slice(queryStart + 1))
  for (const key of [...params.keys()]) {
    if (SENSITIVE_QUERY.test(key)) params.set(key, '[REDACTED]')
  }
  return `${url.slice(0, queryStart)}?${params.toString()}`
}

export function loggerOptions(level: string, apiKeyHeader: string): LoggerOptions {
  const header = apiKeyHeader.toLowerCase()
  return {
    level,
    redact: {
      censor: '[REDACTED]',
      paths: [
        'req.headers.cookie',
        'req.headers.authorization',
        `req.headers["${header}"]`,
        'headers.cookie',
        'headers.authorization',
        `headers["${header}"]`,
        'res.headers["set-cookie"]',
        ...SENSITIVE_KEYS.flatMap((key) => [key, `body.${key}`, `query.${key}`, `input.${key}`]),
      ],
    },
    serializers: {
      req: (request: FastifyRequest) => ({
        method: request.method,
        url: redactUrl(request.url),
        remoteAddress: request.ip,
        userAgent: request.headers['user-agent'],
      }),
    },
  }
}
