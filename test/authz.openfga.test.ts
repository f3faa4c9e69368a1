import { describe, expect, it } from 'vitest'
import { OpenFgaAuthorization } from '../src/authz/openfga.ts'
import { authorizationContract } from './authz.contract.ts'
import { ulid } from './helpers/fake-openfga.ts'
import { realOpenFgaPorts } from './helpers/openfga.ts'

// The OpenFGA adapter against a real OpenFGA server: the shared authorization contract, run when
// TEST_OPENFGA_API_URL (and TEST_OPENFGA_API_TOKEN, if the server wants one) points at a server;
// each model under test gets a store of its own. Without a server, only the tests below that need
// none run; the wire format and failure handling are covered against a fake in
// authz.openfga-http.test.ts.

const apiUrl = process.env.TEST_OPENFGA_API_URL
if (apiUrl) authorizationContract('OpenFGA', realOpenFgaPorts(apiUrl, process.env.TEST_OPENFGA_API_TOKEN))

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
