import { Ajv2020 } from 'ajv/dist/2020.js'
import formats from 'ajv-formats'
import type { FastifyInstance } from 'fastify'

// The suite as a contract test: every reply a test app sends is checked against
// the app's own OpenAPI document (the operation, the status, the media type and the body schema).
// A mismatch is recorded and fails the test that caused it (test/helpers/contract-setup.ts).

const violations: string[] = []

/** The mismatches recorded since the last call, which clears them. */
export function takeContractViolations(): string[] {
  return violations.splice(0)
}

interface Operation {
  responses?: Record<
    string,
    { content?: Record<string, { schema?: unknown }>; headers?: Record<string, unknown> }
  >
}

const pointer = (...segments: string[]) =>
  segments.map((s) => s.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')

const mediaType = (header: unknown) =>
  String(header ?? '')
    .split(';')[0]
    ?.trim()
    .toLowerCase() ?? ''

/**
 * Checks every reply of `app` against its document. Routes hidden from the document (the document
 * itself, the docs UI) and replies to requests that matched no route (the guard's 401, 404) are
 * checked only for being problem+json.
 */
export function checkRepliesAgainstDocument(app: FastifyInstance): void {
  if (!app.hasDecorator('swagger')) return
  let ajv: Ajv2020 | undefined
  let paths: Record<string, Record<string, Operation>> = {}
  const validators = new Map<string, ReturnType<Ajv2020['compile']> | undefined>()
  // Routes added from here on are a test's own scaffolding, not the product's.
  const scaffolding = new Set<string>()
  app.addHook('onRoute', (route) => {
    scaffolding.add(route.url)
  })

  const setUp = () => {
    const document = structuredClone(app.swagger()) as { paths?: typeof paths }
    paths = document.paths ?? {}
    ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true })
    // A CommonJS module whose default export is the plugin.
    ;(formats as unknown as { default: (ajv: Ajv2020) => void }).default(ajv)
    ajv.addSchema({ ...document, $id: 'openapi' })
  }

  app.addHook('onSend', async (request, reply, payload) => {
    if (!ajv) setUp()
    const routeUrl = request.routeOptions.url
    const status = String(reply.statusCode)
    const type = mediaType(reply.getHeader('content-type'))
    const where = `${request.method} ${request.url.split('?')[0]} -> ${status}`
    if (!routeUrl || request.is404) {
      if (reply.statusCode >= 400 && type !== 'application/problem+json')
        violations.push(`${where}: ${type}, not problem+json`)
      return payload
    }
    if (scaffolding.has(routeUrl)) return payload
    const path = routeUrl.replace(/:([A-Za-z0-9_]+)/g, '{$1}').replace(/\*$/, '{*}')
    const method = request.method === 'HEAD' ? 'get' : request.method.toLowerCase()
    const operation = paths[path]?.[method]
    if (!operation) {
      // Hidden routes (docs, the document): their errors are problems all the same.
      if (reply.statusCode >= 400 && type !== 'application/problem+json')
        violations.push(`${where}: ${type}, not problem+json`)
      return payload
    }
    const response = operation.responses?.[status] ?? operation.responses?.default
    if (!response) {
      violations.push(`${where}: status not in the document`)
      return payload
    }
    // A documented header is one the client may rely on: every reply with that status carries it.
    for (const header of Object.keys(response.headers ?? {})) {
      if (!reply.hasHeader(header)) violations.push(`${where}: documented header ${header} missing`)
    }
    if (reply.statusCode === 204 || request.method === 'HEAD' || reply.statusCode === 302) return payload
    const content = response.content ?? {}
    const documentedType = Object.keys(content).find((t) => t === type)
    if (!documentedType) {
      violations.push(`${where}: media type ${type || '(none)'} not in [${Object.keys(content).join(', ')}]`)
      return payload
    }
    if (!type.endsWith('json')) return payload
    const key = `${path} ${method} ${status} ${type}`
    if (!validators.has(key)) {
      const ref = `openapi#/${pointer('paths', path, method, 'responses', operation.responses?.[status] ? status : 'default', 'content', type, 'schema')}`
      validators.set(key, content[type]?.schema === undefined ? undefined : ajv?.compile({ $ref: ref }))
    }
    const validate = validators.get(key)
    if (validate && typeof payload === 'string') {
      const body = payload.length > 0 ? JSON.parse(payload) : null
      if (!validate(body)) {
        violations.push(`${where}: body does not match: ${ajv?.errorsText(validate.errors)}`)
      }
    }
    return payload
  })
}
