// Decorates `app.services`: every domain service, built once by the composition root
// (src/features/compose.ts) from the infrastructure the earlier plugins decorate; starts what runs
// beside them when the app is ready and stops it on close. Needs config, db, authz, storage, mail.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { createServices, type Extensions, type Services } from './compose.ts'

declare module 'fastify' {
  interface FastifyInstance {
    services: Services
  }
}

async function servicesPlugin(app: FastifyInstance, extensions: Extensions) {
  const runtime = await createServices(
    {
      config: app.config,
      clock: app.clock,
      db: app.db,
      database: app.database,
      log: app.log,
      authz: app.authz,
      store: app.storage,
      mail: app.mail,
    },
    extensions,
  )
  app.decorate('services', runtime.services)
  app.addHook('onReady', () => runtime.start())
  app.addHook('onClose', () => runtime.stop())
}

export default fp(servicesPlugin, {
  name: 'services',
  fastify: '5.x',
  dependencies: ['config', 'db', 'authz', 'storage', 'mail'],
})
