// Generates the OpenAPI 3.1 document from the routes' TypeBox schemas and serves it at
// /v3/api-docs, with Swagger UI at /docs; needs config. Registered before the routes so it sees
// them all; not registered at all when docs are disabled (the production default).
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import stringify from 'safe-stable-stringify'
import packageJson from '../../package.json' with { type: 'json' }

/** The security scheme names routes refer to in `schema.security`. */
export const SecuritySchemes = {
  accessCookie: 'accessCookie',
  bearer: 'bearerAuth',
  apiKey: 'apiKey',
  clientBasic: 'clientBasic',
} as const

interface OpenApiDocument {
  paths?: Record<string, unknown>
  components?: { schemas?: Record<string, unknown> }
  [key: string]: unknown
}

const NAMED = /^[A-Z][A-Za-z0-9]*$/

/** The hash of the <style> in Swagger UI's logo: `.logo_small_svg__cls-2{fill:#fff}…` (swagger-ui 5). */
const SWAGGER_LOGO_STYLE = "'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='"

/** JSON with sorted keys and without `$id`, to compare two renderings of one schema. */
const canonical = (value: unknown): string =>
  stringify(value, (key, inner) => (key === '$id' ? undefined : inner)) ?? 'null'

/**
 * Moves every schema with a component-like `title` out of the operations into
 * `components.schemas`, leaving a `$ref` in its place. Two different schemas under one name are a
 * programming error and fail the build of the document.
 */
export function hoistNamedSchemas(document: OpenApiDocument): OpenApiDocument {
  document.components ??= {}
  document.components.schemas ??= {}
  const schemas = document.components.schemas
  const visit = (node: unknown, isSchema: boolean, component = false): unknown => {
    if (Array.isArray(node)) return node.map((item) => visit(item, isSchema))
    if (node === null || typeof node !== 'object') return node
    const entries = Object.entries(node as Record<string, unknown>).map(([key, value]) => {
      // Below `properties`, the keys are names, the values schemas; elsewhere a key says what follows.
      const childIsSchema = key === 'properties' ? false : isSchema || key === 'schema'
      return [key, visit(value, key === 'properties' || childIsSchema)] as const
    })
    const copy = Object.fromEntries(entries)
    const title = copy.title
    if (component || !isSchema || typeof title !== 'string' || !NAMED.test(title) || '$ref' in copy)
      return copy
    const existing = schemas[title]
    if (existing !== undefined && canonical(existing) !== canonical(copy)) {
      throw new Error(`two different schemas are named ${title}:\n${canonical(existing)}\n${canonical(copy)}`)
    }
    schemas[title] = copy
    return { $ref: `#/components/schemas/${title}` }
  }
  // The components first, so a named schema inside one is a reference there too.
  for (const [name, schema] of Object.entries(schemas)) schemas[name] = visit(schema, true, true)
  document.paths = visit(document.paths, false) as Record<string, unknown>
  return document
}

export interface DocsPluginOptions {
  /** false: `/` is left to the demo console. */
  root?: boolean
}

async function docsPlugin(app: FastifyInstance, options: DocsPluginOptions) {
  const { auth } = app.config
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Platform core API',
        version: packageJson.version,
        description:
          'Authentication and tenant-scoped resources. Browser users authenticate with the httpOnly access ' +
          'cookie, backends with a client-credential bearer token, integrations with an API key. Errors are ' +
          'application/problem+json with a stable `code`.',
      },
      // Relative: "Try it out" calls whichever host and port served the document.
      servers: [{ url: '/' }],
      components: {
        securitySchemes: {
          [SecuritySchemes.accessCookie]: { type: 'apiKey', in: 'cookie', name: auth.cookie.accessTokenName },
          [SecuritySchemes.bearer]: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
          [SecuritySchemes.apiKey]: { type: 'apiKey', in: 'header', name: auth.apiKey.headerName },
          [SecuritySchemes.clientBasic]: {
            type: 'http',
            scheme: 'basic',
            description: 'OAuth client_secret_basic',
          },
        },
      },
      tags: [
        { name: 'authentication', description: 'Sessions of browser users' },
        {
          name: 'service-accounts',
          description: 'Client credentials for backends (excluded from the generated frontend client)',
        },
        { name: 'users', description: 'Account administration by organization admins' },
        { name: 'api-keys', description: 'The organization’s API keys, managed by its admins' },
        { name: 'outboxes', description: 'What the organization’s mail and webhook outboxes hold' },
        { name: 'authorization', description: 'Relationship-based permission checks' },
        { name: 'configuration', description: 'Per-organization runtime configuration' },
        {
          name: 'purchase-requests',
          description: 'The example resource (excluded from the generated frontend client)',
        },
        { name: 'operations', description: 'Health and metrics' },
        {
          name: 'oauth2',
          description:
            'OAuth 2.0 for machines: token, introspection, JWK set, discovery (form bodies, RFC 6749 errors)',
        },
      ],
    },
    // Each operation's security follows its route config: `public` routes need nothing, routes
    // with a `scope` accept the user cookie or a machine credential holding that scope, the others
    // are for signed-in users only.
    transform: ({ schema, url, route }) => {
      if (!schema || schema.security) return { schema, url }
      const config = (route.config ?? {}) as { public?: boolean; scope?: string }
      const security: Record<string, string[]>[] = config.public
        ? []
        : config.scope
          ? [
              { [SecuritySchemes.accessCookie]: [] },
              { [SecuritySchemes.bearer]: [config.scope] },
              { [SecuritySchemes.apiKey]: [config.scope] },
            ]
          : [{ [SecuritySchemes.accessCookie]: [] }]
      return {
        schema: { ...schema, security, ...(config.scope ? { 'x-required-scope': config.scope } : {}) },
        url,
      }
    },
    // Named schemas (a `title`) become components wherever a route uses them, so a generated client
    // has one reusable type per resource.
    transformObject: (documentObject) =>
      hoistNamedSchemas((documentObject as { openapiObject: OpenApiDocument }).openapiObject) as never,
    refResolver: {
      // Shared schemas keep their $id as their component name (`Problem`), not `def-0`.
      buildLocalReference: (json, _baseUri, _fragment, i) =>
        typeof json.$id === 'string' ? json.$id : `def-${i}`,
    },
  })
  // The document and the UI are public, reachable without credentials. Swagger UI registers its own
  // routes, so they are marked public as they are added, in a scope of their own.
  await app.register(async (ui) => {
    ui.addHook('onRoute', (route) => {
      route.config = { ...route.config, public: true }
    })
    // Swagger UI's own content security policy (its scripts and styles by hash), framed by no one
    // and without upgrade-insecure-requests, which would break plain-HTTP development. Its top
    // bar's logo is an inline SVG holding a <style> element: that element's hash lets exactly it
    // in (no 'unsafe-inline'), so the page logs no violation.
    await ui.register(swaggerUi, {
      routePrefix: '/docs',
      uiConfig: { deepLinking: true },
      staticCSP: true,
      transformStaticCSP: (header) =>
        header
          .replace("frame-ancestors 'self'", "frame-ancestors 'none'")
          .replace(/\s*upgrade-insecure-requests;?/, '')
          .replace("style-src 'self'", `style-src 'self' ${SWAGGER_LOGO_STYLE}`),
    })
  })
  app.get('/v3/api-docs', { config: { public: true }, schema: { hide: true } }, async () => app.swagger())
  // The root points newcomers to the interactive docs, unless the demo console has it.
  if (options.root !== false) {
    app.get('/', { config: { public: true }, schema: { hide: true } }, (_request, reply) =>
      reply.redirect('/docs'),
    )
  }
}

export default fp(docsPlugin, { name: 'docs', fastify: '5.x', dependencies: ['config'] })
