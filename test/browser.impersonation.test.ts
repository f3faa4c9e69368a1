import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import { ACCOUNT_TEST_CONFIG, newOrganization, newUser, type TestUser } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { launchChromium, signInThroughConsole } from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'

// Impersonation and the security policies in the console, in real headless Chromium against a real
// server: an admin views the console as a member (reason asked), sees the banner on every screen,
// stops, and is back in their own session; the security-policies screen stores a policy.

let t: TestApp
let browser: Browser
let base: string
let admin: TestUser
let member: TestUser
let organizationId: string

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  t = await createTestApp({
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      'platform.web.public-url': base,
      'platform.auth.rate-limit.refresh-per-minute': '1000',
    },
    deps: { console: true },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  browser = await launchChromium()
  organizationId = await newOrganization(t.app)
  admin = await newUser(t.app, { organizationId, role: 'admin' })
  member = await newUser(t.app, { organizationId })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
})

/** GET /api/auth/me through the page's own client. */
const me = (page: Page) =>
  page.evaluate(async () => {
    const { platform } = (
      globalThis as unknown as {
        platformConsole: {
          platform: { api: { GET(path: string): Promise<{ data: Record<string, unknown> }> } }
        }
      }
    ).platformConsole
    return (await platform.api.GET('/api/auth/me')).data
  })

describe('the console', () => {
  it("views as a member with a reason, shows the banner on every screen, and stops back into the admin's session", async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const errors: string[] = []
    page.on('pageerror', (error) => errors.push(error.message))
    await signInThroughConsole(page, base, admin)
    const own = await me(page)
    expect(own).toMatchObject({ userId: admin.id, impersonatorId: null })

    await page.goto(`${base}/#/users`)
    await page.getByRole('button', { name: `View as ${member.email}` }).click()
    await page.getByLabel('Reason').fill('Checking the report page for ticket 4711')
    await page.getByRole('button', { name: 'View as this user' }).click()

    const banner = page.getByRole('region', { name: 'Impersonation' })
    await expect.poll(() => banner.isVisible()).toBe(true)
    await expect.poll(() => banner.textContent()).toContain(member.email)
    await expect.poll(() => page.locator('#who').textContent()).toContain(member.email)
    expect(await me(page)).toMatchObject({ userId: member.id, impersonatorId: admin.id })
    // Every screen: the member's purchase requests too.
    await page.goto(`${base}/#/purchase-requests`)
    await expect.poll(() => banner.isVisible()).toBe(true)
    // A member's console has no users screen: the admin's tools are not theirs.
    expect(await page.locator('#nav a[data-route="users"]').count()).toBe(0)

    await page.getByRole('button', { name: 'Stop viewing as this user' }).click()
    await expect.poll(() => page.locator('#who').textContent()).toContain(admin.email)
    await expect.poll(() => banner.count()).toBe(0)
    expect(await me(page)).toMatchObject({ userId: admin.id, impersonatorId: null, sessionId: own.sessionId })
    expect(errors).toEqual([])
    await context.close()
  })

  it('stores a security policy from the security-policies screen', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    await signInThroughConsole(page, base, admin)
    await page.goto(`${base}/#/security`)
    await page.getByLabel('Session maximum age').fill('8h')
    await page.getByRole('button', { name: 'Save policies' }).click()
    await expect
      .poll(
        async () =>
          (
            await t.app.db
              .selectFrom('organization_config')
              .select('value')
              .where('organization_id', '=', organizationId)
              .where('key', '=', 'security.session-max-age')
              .executeTakeFirst()
          )?.value,
      )
      .toBe('8h')
    await context.close()
  })
})
