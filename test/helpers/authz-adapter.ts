import type { Kysely } from 'kysely'
import { afterAll } from 'vitest'
import { EmbeddedAuthorization } from '../../src/authz/embedded.ts'
import { loadModel, ModelIndex } from '../../src/authz/model.ts'
import type { AuthorizationPort } from '../../src/authz/port.ts'
import type { ConfigSource } from '../../src/config.ts'
import type { Database } from '../../src/db/schema.ts'
import { type OpenFgaServer, startOpenFga } from './openfga-server.ts'

// The authorization adapter the test apps run on: the embedded evaluator by default; with
// TEST_AUTHZ=openfga, a real OpenFGA server started once per test file (in-memory datastore,
// stopped after the file), each database with a store of its own holding the model of
// fga-model.fga, made as `npm run cli -- authz init` makes it. The OpenFGA SDK is only loaded then.

export type TestAuthzAdapter = 'embedded' | 'openfga'

function adapterFromEnv(): TestAuthzAdapter {
  const value = process.env.TEST_AUTHZ ?? 'embedded'
  if (value !== 'embedded' && value !== 'openfga') {
    throw new Error(`TEST_AUTHZ must be embedded or openfga, not ${JSON.stringify(value)}`)
  }
  return value
}

export const testAuthzAdapter: TestAuthzAdapter = adapterFromEnv()

let server: Promise<OpenFgaServer> | undefined

// Registered while the test file is collected, so it runs after every app of the file has closed.
if (testAuthzAdapter === 'openfga') {
  afterAll(async () => {
    const started = await server?.catch(() => undefined)
    await started?.stop()
  })
}

/** This test file's OpenFGA server, started on first use. */
export function fileOpenFgaServer(): Promise<OpenFgaServer> {
  server ??= startOpenFga()
  return server
}

/** A new store on this file's server with the service's model: the ids `authz init` prints. */
async function newStore(): Promise<{ server: OpenFgaServer; storeId: string; modelId: string }> {
  const started = await fileOpenFgaServer()
  const { initializeOpenFga } = await import('../../src/authz/init.ts')
  const ids = await initializeOpenFga(started.url, started.apiToken, await loadModel())
  return { server: started, ...ids }
}

const configs = new WeakMap<object, Promise<ConfigSource>>()

/**
 * The configuration that points an app on `database` at the adapter under test: nothing for the
 * embedded evaluator; `platform.authz.openfga.*` for OpenFGA, one store per database, so that two
 * instances on one database share their tuples.
 */
export function authzConfigFor(database: object): Promise<ConfigSource> {
  if (testAuthzAdapter === 'embedded') return Promise.resolve({})
  let config = configs.get(database)
  if (!config) {
    config = newStore().then(({ server: started, storeId, modelId }) => ({
      'platform.authz.openfga.api-url': started.url,
      'platform.authz.openfga.store-id': storeId,
      'platform.authz.openfga.model-id': modelId,
      ...(started.apiToken ? { 'platform.authz.openfga.api-token': started.apiToken } : {}),
    }))
    configs.set(database, config)
  }
  return config
}

/**
 * A port of the adapter under test, for a test that hands the app its own (wrapped) port: the
 * embedded evaluator over `db`, or OpenFGA on a new store. The caller closes it.
 */
export async function testAuthorizationPort(db: Kysely<Database>): Promise<AuthorizationPort> {
  if (testAuthzAdapter === 'embedded') return new EmbeddedAuthorization(db, new ModelIndex(await loadModel()))
  const { server: started, storeId, modelId } = await newStore()
  const { OpenFgaAuthorization } = await import('../../src/authz/openfga.ts')
  return new OpenFgaAuthorization({ apiUrl: started.url, apiToken: started.apiToken, storeId, modelId })
}
