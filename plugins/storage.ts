// Decorates `app.storage` (the object store: S3 at platform.storage.s3.endpoint, or one the caller
// owns) and `app.files` (the file service and its registry of resource types, which features add
// to with `app.files.registerResourceType`); adds the storage readiness check (the bucket answers);
// needs config, db, health and authz.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { FileService } from '../src/services/files.ts'
import type { ObjectStore } from '../src/storage/port.ts'
import { createObjectStore } from '../src/storage/s3.ts'

declare module 'fastify' {
  interface FastifyInstance {
    storage: ObjectStore
    files: FileService
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
  app.decorate(
    'files',
    new FileService({
      db: app.db,
      store,
      authz: app.authz,
      model: app.authz.model,
      clock: app.clock,
      storage: app.config.storage,
    }),
  )
  app.readiness.add('storage', () => store.ready())
  app.addHook('onClose', async () => {
    if (owned) await store.close()
  })
}

export default fp(storagePlugin, {
  name: 'storage',
  fastify: '5.x',
  dependencies: ['config', 'db', 'health', 'authz'],
})
