// Runs every request inside its tenant context (src/context.ts), from the principal's
// organization. The context is entered by the auth plugin's onRequest hook once the principal is
// known (`enterRequestTenant`), and re-entered in preValidation on the routes whose requests can
// carry a body, because such a request reaches its handler from the body parser's async context
// rather than from onRequest's (GET and HEAD bodies are not parsed). Needs auth.
import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { enterTenantContext, type TenantContext } from '../context.ts'

declare module 'fastify' {
  interface FastifyRequest {
    tenantContext: TenantContext | null
  }
}

/** Enters the tenant context of the request's principal and continues the request inside it. */
export function enterRequestTenant(request: FastifyRequest, done: () => void): void {
  // The request itself: its origin is read only when an audit event is recorded.
  const context: TenantContext = { organizationId: request.principal?.organizationId ?? null, request }
  request.tenantContext = context
  enterTenantContext(context, done)
}

const reenter: onRequestHookHandler = (request, _reply, done) => {
  if (request.tenantContext) enterTenantContext(request.tenantContext, done)
  else done()
}

const NO_BODY = new Set(['GET', 'HEAD'])

async function tenantPlugin(app: FastifyInstance) {
  app.decorateRequest('tenantContext', null)

  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    if (methods.every((method) => NO_BODY.has(method))) return
    const own = route.preValidation
    route.preValidation = own ? [reenter, ...[own].flat()] : reenter
  })
}

export default fp(tenantPlugin, { name: 'tenant', fastify: '5.x', dependencies: ['auth'] })
