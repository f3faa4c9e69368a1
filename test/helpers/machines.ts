import { randomUUID } from 'node:crypto'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance, FastifySchema } from 'fastify'
import { expect } from 'vitest'
import { type Principal, requirePrincipal } from '../../src/principal.ts'

// Machine principals in tests: API keys and service accounts made with chosen scopes, the headers
// that present them, and a protected test route that answers who the caller is.

/** What GET /api/test/scoped answers: the principal, its organization and its scopes (sorted). */
export const PrincipalView = Type.Object({
  type: Type.String(),
  id: Type.String(),
  organizationId: Type.Union([Type.String(), Type.Null()]),
  scopes: Type.Union([Type.Array(Type.String()), Type.Null()]),
})

/** The principal as GET /api/test/scoped shows it; a user has no scopes (null). */
export const principalView = (principal: Principal) => ({
  type: principal.type,
  id: principal.id,
  organizationId: principal.organizationId,
  scopes: principal.type === 'USER' ? null : [...principal.scopes].sort(),
})

/** Options of a test route that needs the scope files:read, tagged `test` in the OpenAPI document. */
export function filesReadRoute<S extends FastifySchema>(operationId: string, schema: S) {
  return { config: { scope: 'files:read' as const }, schema: { tags: ['test'], operationId, ...schema } }
}

/** Protected routes for `configure`: GET /api/test/scoped (files:read) shows the principal; plus `more`. */
export function protectedTestRoutes(more: (feature: FastifyInstance) => void = () => {}) {
  return async (app: FastifyInstance): Promise<void> => {
    await app.register(async (feature) => {
      feature.get(
        '/api/test/scoped',
        filesReadRoute('testScoped', { response: { 200: PrincipalView } }),
        async (request) => principalView(requirePrincipal(request)),
      )
      more(feature)
    })
  }
}

export interface TestApiKey {
  id: string
  rawKey: string
  keyPrefix: string
  organizationId: string
  /** The default header that presents the key. */
  headers: { 'x-api-key': string }
}

/** An API key of the organization with these scopes; its membership tuples are only queued. */
export async function newApiKey(
  app: FastifyInstance,
  organizationId: string,
  scopes: string[],
  options: { description?: string; expiresAt?: Date | null } = {},
): Promise<TestApiKey> {
  const key = await app.services.apiKeys.create({
    organizationId,
    scopes,
    description: options.description ?? 'integration',
    expiresAt: options.expiresAt ?? null,
  })
  return { ...key, organizationId, headers: { 'x-api-key': key.rawKey } }
}

/** An API key of the organization whose membership tuples have been delivered. */
export async function newDeliveredApiKey(
  app: FastifyInstance,
  organizationId: string,
  scopes: string[],
): Promise<TestApiKey> {
  const key = await newApiKey(app, organizationId, scopes)
  await app.authz.outbox.runOnce()
  return key
}

/** A new service account's bearer token, issued over POST /api/auth/service-token (which must answer 200). */
export async function serviceBearer(
  app: FastifyInstance,
  scopes: string[],
  clientId = `backend-${randomUUID()}`,
): Promise<{ authorization: string }> {
  const account = await app.services.serviceAccounts.create({ clientId, description: 'a backend', scopes })
  const token = await app.inject({
    method: 'POST',
    url: '/api/auth/service-token',
    payload: { clientId: account.clientId, clientSecret: account.clientSecret },
  })
  expect(token.statusCode).toBe(200)
  return { authorization: `Bearer ${token.json().accessToken}` }
}
