// The OAuth 2.0 feature for machines: POST /oauth2/token, POST /oauth2/introspect,
// GET /.well-known/jwks.json and the discovery documents, over the service accounts and the access
// tokens of the machine-principals and sessions features.
import type { FastifyInstance } from 'fastify'
import oauthRoutes from './routes.ts'

export default async function oauth2Feature(app: FastifyInstance) {
  await app.register(oauthRoutes)
}
