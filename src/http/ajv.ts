// The schema compiler of request validation (`validatorFor`, Fastify's `buildValidator`): path,
// query and header values coerced from text and required to be finite, bodies validated as sent.
import { AjvCompiler, type ValidatorFactory } from '@fastify/ajv-compiler'

const AJV_OPTIONS = { removeAdditional: false, useDefaults: true, allErrors: false } as const
const ajvPool = AjvCompiler()

/**
 * Two validators: path, query and header values arrive as text, so they are coerced to the
 * schema's types (`?limit=20` is the number 20); a JSON body arrives typed, so it is validated as
 * sent: `{"title": 12345}` is 400 VALIDATION_FAILED, never the string "12345".
 */
// Fastify calls the compiler with the route definition ({schema, method, url, httpPart}), which the
// package's types describe as a bare schema.
type Compile = (route: { httpPart?: string }) => unknown
type BuildFromPool = (externalSchemas: unknown, options: unknown) => Compile

function buildValidator(externalSchemas: unknown, options: unknown): Compile {
  const { customOptions: _ignored, ...rest } = (options ?? {}) as { customOptions?: unknown }
  const pool = ajvPool as unknown as BuildFromPool
  const text = pool(externalSchemas, { ...rest, customOptions: { ...AJV_OPTIONS, coerceTypes: 'array' } })
  const body = pool(externalSchemas, { ...rest, customOptions: { ...AJV_OPTIONS, coerceTypes: false } })
  return (route) => (route.httpPart === 'body' ? body(route) : finiteOnly(text(route) as Validate))
}

/** A compiled Ajv validator, as Fastify calls it. */
interface Validate {
  (data: unknown, context?: unknown): unknown
  errors?: unknown
  schemaEnv?: unknown
}

/**
 * Ajv's coercion turns text such as `Infinity` or `1e999` into a number that is not finite, which
 * then passes `type: integer` and skips `minimum` and `maximum` (they compare finite numbers only):
 * `?limit=Infinity` would reach the handler, and the database, as Infinity. After coercion, a value
 * of a path, query or header that is not a finite number fails like any other schema violation.
 */
function finiteOnly(validate: Validate): Validate {
  const checked: Validate = (data, context) => {
    const valid = validate(data, context)
    if (valid !== true) {
      checked.errors = validate.errors
      return valid
    }
    const path = nonFinitePath(data, '')
    checked.errors =
      path === null
        ? null
        : [{ instancePath: path, keyword: 'type', params: {}, message: 'must be a finite number' }]
    return path === null
  }
  // Fastify passes the parent of the validated value only to a validator with this property.
  checked.schemaEnv = validate.schemaEnv
  return checked
}

function nonFinitePath(value: unknown, path: string): string | null {
  if (typeof value === 'number') return Number.isFinite(value) ? null : path
  if (value && typeof value === 'object') {
    for (const [key, inner] of Object.entries(value)) {
      const found = nonFinitePath(inner, `${path}/${key}`)
      if (found !== null) return found
    }
  }
  return null
}

export const validatorFor = buildValidator as unknown as ValidatorFactory
