// Decorates `app.authz`: the authorization port (OpenFGA when configured, the embedded evaluator
// otherwise), the parsed model, the outbox worker (started and stopped with the other outbox
// workers, src/features/outbox-workers.ts) and `check(principal, relation, object)`; adds the
// authorization readiness check; needs config, db and health. Checks fail closed: an
// authorization server that cannot answer gives 503, never an allow.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { ConfigError } from '../config.ts'
import { EmbeddedAuthorization } from './embedded.ts'
import { loadModel, ModelIndex } from './model.ts'
import { hasPendingTupleChange } from './outbox-store.ts'
import { AuthzOutboxWorker } from './outbox-worker.ts'
import { createPermissions, type Permissions } from './permissions.ts'
import type { AuthorizationPort } from './port.ts'
import { enqueueTupleChanges, type TupleRecorder } from './tuples.ts'

export interface Authz extends Permissions {
  port: AuthorizationPort
  model: ModelIndex
  outbox: AuthzOutboxWorker
  /**
   * Records the tuple changes a unit of work causes, in its transaction: applied at once by the
   * embedded evaluator over this database, queued in the outbox for an authorization server.
   */
  tuples: TupleRecorder
}

declare module 'fastify' {
  interface FastifyInstance {
    authz: Authz
  }
}

export interface AuthzPluginOptions {
  /** An adapter the caller owns (tests); otherwise chosen from the configuration. */
  port?: AuthorizationPort | undefined
}

async function configuredPort(app: FastifyInstance, model: ModelIndex): Promise<AuthorizationPort> {
  const { openfga } = app.config.authz
  if (openfga.apiUrl) {
    if (!openfga.storeId)
      throw new ConfigError(
        'platform.authz.openfga.store-id',
        'is required with an OpenFGA api-url (npm run cli -- authz init prints it)',
      )
    if (!openfga.modelId)
      throw new ConfigError(
        'platform.authz.openfga.model-id',
        'is required with an OpenFGA api-url (npm run cli -- authz init prints it)',
      )
    // Loaded only when configured: the OpenFGA SDK is 13 MB of memory a deployment on the embedded
    // evaluator does not need.
    const { OpenFgaAuthorization } = await import('./openfga.ts')
    return new OpenFgaAuthorization({
      apiUrl: openfga.apiUrl,
      storeId: openfga.storeId,
      modelId: openfga.modelId,
      apiToken: openfga.apiToken,
    })
  }
  if (app.config.profile === 'production') {
    throw new ConfigError('platform.authz.openfga.api-url', 'is required under the production profile')
  }
  return new EmbeddedAuthorization(app.db, model)
}

async function authzPlugin(app: FastifyInstance, options: AuthzPluginOptions) {
  const model = new ModelIndex(await loadModel())
  const port = options.port ?? (await configuredPort(app, model))
  const outbox = new AuthzOutboxWorker({
    db: app.db,
    port,
    clock: app.clock,
    log: app.log,
    listen: app.database.listen,
  })

  // The embedded evaluator applies changes in their own transaction, and answers a check along with
  // a read of this database in one statement; for a server changes are queued and reads come first.
  const embedded = port instanceof EmbeddedAuthorization ? port : undefined
  const recorder = embedded ? embedded.recorderFor(app.db) : null
  const permissions = createPermissions(
    port,
    app.log,
    recorder
      ? undefined
      : {
          waiting: (subject, object) => hasPendingTupleChange(app.db, subject, object),
          deliver: () => outbox.kick(),
        },
    embedded,
  )

  app.decorate('authz', {
    port,
    model,
    outbox,
    tuples: recorder || {
      record: enqueueTupleChanges,
      // After commit, without holding the response: a check that needs the change delivers it first.
      deliver: async () => void outbox.kick(),
    },
    check: permissions.check,
    require: permissions.require,
    checkWithRead: permissions.checkWithRead,
  } satisfies Authz)
  app.readiness.add('authorization', () => port.ready())
  if (!options.port) app.addHook('onClose', () => port.close())
}

export default fp(authzPlugin, { name: 'authz', fastify: '5.x', dependencies: ['config', 'db', 'health'] })
