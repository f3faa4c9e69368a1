// Route declarations for impersonation: what an organization admin acting as a user may not do.
// The auth plugin (src/http/auth.ts) refuses the routes so declared.
import type { FastifyInstance } from 'fastify'

/**
 * Declares every route `scope` registers from now on as refused to an admin impersonating a user
 * (their `notWhileImpersonating` config): a whole feature's administration or credentials at once.
 * `reads: false` leaves GET routes open.
 */
export function refuseWhileImpersonating(scope: FastifyInstance, options: { reads: boolean }): void {
  scope.addHook('onRoute', (route) => {
    if (route.config?.public) return
    const methods = [route.method].flat()
    if (!options.reads && methods.every((method) => method === 'GET' || method === 'HEAD')) return
    route.config = { ...route.config, notWhileImpersonating: true }
  })
}
