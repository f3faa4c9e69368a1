// The permission-check feature: POST /api/authz/check answers whether the caller holds a relation
// on an object, from the authorization port.
import type { FastifyInstance } from 'fastify'
import permissionCheckRoutes from './routes.ts'

export default async function permissionChecksFeature(app: FastifyInstance) {
  await app.register(permissionCheckRoutes, { prefix: '/api/authz' })
}
