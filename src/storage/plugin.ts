// Decorates `app.storage` (the object store: S3 at platform.storage.s3.endpoint, or one the caller
// owns) and adds the storage readiness check (the bucket answers); needs config and health.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { ObjectStore } from './port.ts'
import { createObjectStore } from './s3.ts'

declare module 'fastify' {
  interface FastifyInstance {
    storage: ObjectStore
  }
}

export interface StoragePluginOptions {
  /** A store the caller owns (tests); the app then does not close it. */
  store?: ObjectStore | undefined
}

async function storagePlugin(app: FastifyInstance, options: StoragePluginOptions) {
  const owned = options.store === undefined
  const store = options.store ?? createObjectStore(app.config)
  app.decorate('storage', store)
  app.readiness.add('storage', () => store.ready())
  app.addHook('onClose', async () => {
    if (owned) await store.close()
  })
}

export default fp(storagePlugin, {
  name: 'storage',
  fastify: '5.x',
  dependencies: ['config', 'health'],
})
