import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OpenFgaAuthorization } from '../src/authz/openfga.ts'
import { authorizationContract } from './authz.contract.ts'
import { ulid } from './helpers/fake-openfga.ts'
import { realOpenFgaPorts } from './helpers/openfga.ts'
import { type OpenFgaServer, openFgaAvailable, startOpenFga } from './helpers/openfga-server.ts'

// The OpenFGA adapter against a real OpenFGA server, the version compose.yaml pins
// (npm run openfga:install), started for this file with the in-memory datastore: the shared
// authorization contract, each model under test in a store of its own. TEST_OPENFGA_API_URL (and
// TEST_OPENFGA_API_TOKEN) point it at a server of your own instead.

let server: OpenFgaServer | undefined
const ownServer = process.env.TEST_OPENFGA_API_URL
if (ownServer || openFgaAvailable) {
  if (!ownServer) {
    beforeAll(async () => {
      server = await startOpenFga()
    }, 60_000)
    afterAll(() => server?.stop())
  }
  authorizationContract('OpenFGA', async (dsl) =>
    realOpenFgaPorts(ownServer ?? (server as OpenFgaServer).url, process.env.TEST_OPENFGA_API_TOKEN)(dsl),
  )
}

describe('OpenFGA adapter configuration', () => {
  // Nothing listens here: construction must fail before any request is made.
  const unreachable = 'http://127.0.0.1:9'

  it('refuses to be constructed without a model id, naming the property', () => {
    expect(
      () => new OpenFgaAuthorization({ apiUrl: unreachable, storeId: ulid(), modelId: undefined }),
    ).toThrow(/platform\.authz\.openfga\.model-id/)
  })

  it('refuses a store id or model id that is not a ULID, naming the property', () => {
    expect(
      () => new OpenFgaAuthorization({ apiUrl: unreachable, storeId: 'my-store', modelId: ulid() }),
    ).toThrow(/platform\.authz\.openfga\.store-id/)
    expect(
      () => new OpenFgaAuthorization({ apiUrl: unreachable, storeId: ulid(), modelId: 'latest' }),
    ).toThrow(/platform\.authz\.openfga\.model-id/)
  })

  it('refuses to be constructed without an api url, or with one that is not an http(s) address', () => {
    expect(() => new OpenFgaAuthorization({ apiUrl: undefined, storeId: ulid(), modelId: ulid() })).toThrow(
      /platform\.authz\.openfga\.api-url/,
    )
    expect(() => new OpenFgaAuthorization({ apiUrl: 'ftp://fga', storeId: ulid(), modelId: ulid() })).toThrow(
      /platform\.authz\.openfga\.api-url/,
    )
  })
})
