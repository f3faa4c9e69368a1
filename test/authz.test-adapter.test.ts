import { describe, expect, it } from 'vitest'
import { EmbeddedAuthorization } from '../src/authz/embedded.ts'
import { OpenFgaAuthorization } from '../src/authz/openfga.ts'
import { useTestApp, useTestAppBeside } from './helpers/app.ts'
import { useAuthzTestApp } from './helpers/authz.ts'
import { testAuthzAdapter } from './helpers/authz-adapter.ts'

// The test apps run on the authorization adapter TEST_AUTHZ names (test/helpers/authz-adapter.ts),
// so that `npm run test:openfga` cannot quietly fall back to the embedded evaluator.

const expected = testAuthzAdapter === 'openfga' ? OpenFgaAuthorization : EmbeddedAuthorization

describe(`test apps under TEST_AUTHZ=${testAuthzAdapter}`, () => {
  const t = useTestApp()
  const beside = useTestAppBeside(t)
  const switchable = useAuthzTestApp()

  it('configure the app with that adapter', () => {
    expect(t.app.authz.port).toBeInstanceOf(expected)
    expect(Boolean(t.config.authz.openfga.apiUrl)).toBe(testAuthzAdapter === 'openfga')
  })

  it('give two instances on one database one store', () => {
    expect(beside.config.authz).toEqual(t.config.authz)
  })

  it('put that adapter behind the switchable port', () => {
    expect(switchable.port.inner).toBeInstanceOf(expected)
  })
})
