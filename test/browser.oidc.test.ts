import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import { ACCOUNT_TEST_CONFIG, uniqueEmail } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { launchChromium, seriousViolations } from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'
import { EMAIL_PROOF_CONFIG } from './helpers/email-proofs.ts'
import { type RunningProvider, startOidcProvider } from './helpers/oidc.ts'

// "Continue with …" as people meet it: real headless Chromium on the console, the app listening on
// a port, and two oidc-provider instances on loopback whose own login and consent pages the browser
// fills in. A first sign-in creates the account (sign-up is on); the account screen links the
// second provider's identity, which then signs the same account in.

let t: TestApp
let browser: Browser
let base: string
let acme: RunningProvider
let beta: RunningProvider

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  ;[acme, beta] = await Promise.all([
    startOidcProvider(`${base}/api/auth/oidc/callback`),
    startOidcProvider(`${base}/api/auth/oidc/callback`),
  ])
  t = await createTestApp({
    // Near real time: the cookies' lifetimes follow the app's clock, and the browser's.
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      ...EMAIL_PROOF_CONFIG,
      'platform.web.public-url': base,
      'platform.web.frontend-url': base,
      'platform.auth.oidc.providers': JSON.stringify([
        {
          id: 'acme',
          name: 'Acme ID',
          issuer: acme.issuer,
          clientId: acme.clientId,
          clientSecret: acme.clientSecret,
        },
        {
          id: 'beta',
          name: 'Beta ID',
          issuer: beta.issuer,
          clientId: beta.clientId,
          clientSecret: beta.clientSecret,
        },
      ]),
    },
    deps: { console: true },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  browser = await launchChromium()
}, 120_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
  await Promise.all([acme?.close(), beta?.close()])
})

/** The provider's own pages (oidc-provider's login, then its consent), as a person fills them in. */
async function passProvider(page: Page, provider: RunningProvider, login: string) {
  await page.waitForURL((url) => url.origin === provider.issuer)
  await page.locator('input[name="login"]').fill(login)
  await page.locator('input[name="password"]').fill('anything')
  await page.getByRole('button', { name: 'Sign-in' }).click()
  await page.getByRole('button', { name: 'Continue' }).click()
  await page.waitForURL((url) => url.origin === base)
}

/** A page of a new browser context, with the page's uncaught errors collected. */
async function newPage() {
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors: string[] = []
  page.on('pageerror', (error) => errors.push(error.message))
  return { context, page, errors }
}

it('signs a new person up with a provider, links a second provider on the account screen, and signs in with it', async () => {
  const email = uniqueEmail('chromium')
  acme.accounts.set('pat', { email, email_verified: true, name: 'Pat Doe' })
  beta.accounts.set('pat-at-beta', { email: uniqueEmail('beta'), email_verified: false })
  const { context, page, errors } = await newPage()

  await page.goto(base)
  const acmeButton = page.getByRole('link', { name: 'Continue with Acme ID' })
  await expect.poll(() => acmeButton.isVisible()).toBe(true)
  await expect.poll(() => page.getByRole('link', { name: 'Continue with Beta ID' }).isVisible()).toBe(true)
  expect(await seriousViolations(page)).toEqual([])
  await acmeButton.click()
  await passProvider(page, acme, 'pat')
  await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
  await expect.poll(() => page.locator('#app').textContent()).toContain(email)
  expect(new URL(page.url()).search).toBe('')

  // Linking: the account screen, a sign-in just now, the second provider's pages, back to the screen.
  await page.goto(`${base}/#account`)
  await page.getByRole('button', { name: 'Link Beta ID' }).click()
  await passProvider(page, beta, 'pat-at-beta')
  const rows = page.locator('#identities tr')
  await expect.poll(() => rows.count()).toBe(2)
  await expect.poll(() => page.locator('#identities').textContent()).toContain('Beta ID')
  expect(await seriousViolations(page)).toEqual([])

  // Signed out, the linked identity signs the same account in (the provider remembers Pat: no login page).
  await page.getByRole('button', { name: 'Sign out', exact: true }).click()
  await expect.poll(() => page.getByRole('link', { name: 'Continue with Beta ID' }).isVisible()).toBe(true)
  await page.getByRole('link', { name: 'Continue with Beta ID' }).click()
  await page.waitForURL((url) => url.origin === base && url.search === '')
  await expect.poll(() => page.locator('#app').textContent()).toContain(email)
  expect(errors).toEqual([])
  await context.close()
}, 120_000)

it('tells a person whose sign-in came back refused why, on the sign-in page (the flow cookie gone)', async () => {
  acme.accounts.set('lee', { email: uniqueEmail('refused'), email_verified: true, name: 'Lee Doe' })
  const { context, page, errors } = await newPage()

  await page.goto(base)
  const acmeButton = page.getByRole('link', { name: 'Continue with Acme ID' })
  await expect.poll(() => acmeButton.isVisible()).toBe(true)
  await acmeButton.click()
  // At the provider, the sign-in's cookie goes (expired, or another browser comes back): refused.
  await page.waitForURL((url) => url.origin === acme.issuer)
  await context.clearCookies({ name: 'oidc_flow' })
  await passProvider(page, acme, 'lee')

  const alert = page.getByRole('alert').filter({ hasText: 'OIDC_STATE_INVALID' })
  await expect.poll(() => alert.textContent()).toContain('That sign-in was not started in this browser')
  expect(await page.getByRole('heading', { name: 'Sign in' }).isVisible()).toBe(true)
  expect(new URL(page.url()).search).toBe('')
  expect((await context.cookies()).map((cookie) => cookie.name)).not.toContain('access_token')
  expect(await seriousViolations(page)).toEqual([])
  expect(errors).toEqual([])
  await context.close()
}, 120_000)
