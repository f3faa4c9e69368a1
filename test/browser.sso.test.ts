import { randomBytes } from 'node:crypto'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, signIn, type TestUser } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { launchChromium, seriousViolations, signInThroughConsole } from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'
import { TestDnsServer } from './helpers/dns-server.ts'
import { type RunningProvider, startOidcProvider } from './helpers/oidc.ts'

// One organization connection's whole redirect flow in real headless Chromium: the address typed in
// the console's sign-in form goes, with "Sign in with SSO", to POST /api/auth/sso/start, the browser
// follows the answer to the organization's identity
// provider (oidc-provider on loopback, its own login and consent pages), comes back to the shared
// callback with its flow cookie, and lands on the console signed in to the connection's
// organization, its account provisioned just in time.

let t: TestApp
let dns: TestDnsServer
let idp: RunningProvider
let browser: Browser
let base: string
const domain = `corp-${randomBytes(4).toString('hex')}.test`
let organizationId: string
let admin: TestUser

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  dns = await TestDnsServer.start()
  idp = await startOidcProvider(`${base}/api/auth/oidc/callback`)
  t = await createTestApp({
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      'platform.web.public-url': base,
      'platform.web.frontend-url': base,
      'platform.dns.servers': dns.address,
    },
    deps: { console: true },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  // The organization: its admin claims and proves the domain, and connects the provider.
  admin = await newUser(t.app, { role: 'admin', email: `admin@${domain}` })
  organizationId = admin.organizationId
  const session = await signIn(t.app, admin)
  const post = (url: string, payload?: object) =>
    asUser(t.app, session, { method: 'POST', url, ...(payload ? { payload } : {}) })
  const claim = (await post('/api/organizations/current/sso/domains', { domain })).json()
  dns.publishTxt(claim.txtRecord.name, claim.txtRecord.value)
  await post(`/api/organizations/current/sso/domains/${domain}/verify`)
  const connection = await post('/api/organizations/current/sso/connections', {
    issuer: idp.issuer,
    clientId: idp.clientId,
    clientSecret: idp.clientSecret,
  })
  expect(connection.statusCode).toBe(201)
  browser = await launchChromium()
}, 120_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
  await idp?.close()
  await dns?.close()
})

describe('SSO in Chromium', () => {
  it("walks from the address through the provider's own pages back to a console session in the connection's organization", async () => {
    const email = `jo-${randomBytes(3).toString('hex')}@${domain}`
    idp.accounts.set('jo', { email, email_verified: true, name: 'Jo Doe' })
    const context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(base)
    // The console's sign-in form: the address, then "Sign in with SSO".
    await page.locator('#signin-username').fill(email)
    await page.getByRole('button', { name: 'Sign in with SSO' }).click()
    await page.waitForURL((url) => url.origin === new URL(idp.issuer).origin)
    // oidc-provider's login page, then its consent page.
    await page.locator('input[name="login"]').fill('jo')
    await page.locator('input[name="password"]').fill('any')
    await page.locator('button[type="submit"]').click()
    await page.locator('button[type="submit"]').click()
    await page.waitForURL((url) => url.origin === base && url.pathname === '/')

    const me = await page.evaluate(async () => (await fetch('/api/auth/me')).json())
    expect(me).toMatchObject({ email, organizationId, role: 'member' })
    await context.close()
  }, 60_000)

  it('shows the admin the connection, each domain with its TXT record and status, and the switch', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    await signInThroughConsole(page, base, admin)
    await page.goto(`${base}/#/sso`)
    const verified = page.locator('#sso-domains tr', { hasText: domain })
    await expect.poll(() => verified.textContent()).toContain('Verified')
    expect(await verified.textContent()).toContain(`_platform-verification.${domain}`)
    await expect.poll(() => page.locator('#sso-connections').textContent()).toContain(idp.issuer)

    // A new claim shows the record to publish, pending.
    const pending = `branch-${randomBytes(3).toString('hex')}.test`
    await page.getByLabel('Domain', { exact: true }).fill(pending)
    await page.getByRole('button', { name: 'Claim domain' }).click()
    const row = page.locator('#sso-domains tr', { hasText: pending })
    await expect.poll(() => row.textContent()).toContain('Pending')
    expect(await row.textContent()).toContain(`_platform-verification.${pending}`)
    expect(await seriousViolations(page)).toEqual([])

    await page.locator('#sso-required').check()
    await expect
      .poll(() => t.app.services.orgConfig.getValue(organizationId, 'security.sso-required'))
      .toBe('true')
    await context.close()
  }, 60_000)
})
