// Runs every request inside its tenant context (src/context.ts), from the principal's
// organization; needs auth. Entered in a callback-style onRequest hook and re-entered in
// preValidation, because a request with a body reaches its handler from the body parser's
// async context rather than from onRequest's.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { enterTenantContext, type TenantContext } from '../context.ts'

declare module 'fastify' {
  interface FastifyRequest {
    tenantContext: TenantContext | null
  }
}

async function tenantPlugin(app: FastifyInstance) {
  app.decorateRequest('tenantContext', null)

  app.addHook('onRequest', (request, _reply, done) => {
    // The request itself: its origin is read only when an audit event is recorded.
    const context: TenantContext = { organizationId: request.principal?.organizationId ?? null, request }
    request.tenantContext = context
    enterTenantContext(context, done)
  })

  app.addHook('preValidation', (request, _reply, done) => {
    if (request.tenantContext) enterTenantContext(request.tenantContext, done)
    else done()
  })
}

export default fp(tenantPlugin, { name: 'tenant', fastify: '5.x', dependencies: ['auth'] })
