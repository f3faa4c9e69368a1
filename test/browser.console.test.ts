import { mkdir, readFile } from 'node:fs/promises'
import path from 'node:path'
import { Secret, TOTP } from 'otpauth'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import {
  ACCOUNT_TEST_CONFIG,
  login,
  newUser,
  signIn,
  type TestUser,
  uniqueEmail,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { launchChromium, signInThroughConsole } from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'
import { startTestS3, type TestS3 } from './helpers/s3.ts'
import { WebhookReceiver } from './helpers/webhook-receiver.ts'

// The console (console/) as its users meet it, in real headless Chromium against a real server, the
// embedded S3 server and a webhook receiver: every screen walked as an admin and as a member, each
// screen's main action performed through the page. On every screen, at 1280 and 360 px: axe-core
// finds no serious or critical violation, the page is no wider than the window, and a screenshot is
// kept in test-results/browser/console-<screen>-<width>.png. Nothing in the walk (the signed-out
// first visit and /docs included) logs a console error or throws in the page.

const SHOTS = path.resolve('test-results/browser')
const FIREFOX_ON_WINDOWS = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:128.0) Gecko/20100101 Firefox/128.0'
const NEW_PASSWORD = 'a new and longer passphrase'

let t: TestApp
let s3: TestS3
let receiver: WebhookReceiver
let browser: Browser
let base: string
let axeSource: string

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  s3 = await startTestS3({ allowedOrigins: [base] })
  receiver = await WebhookReceiver.start()
  t = await createTestApp({
    // Near real time: cookie lifetimes and webhook timestamps follow the app's clock.
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      ...s3.config,
      'platform.web.public-url': base,
      'platform.auth.rate-limit.refresh-per-minute': '1000',
      'platform.webhooks.allow-private-networks': 'true',
    },
    deps: { console: true },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  browser = await launchChromium()
  axeSource = await readFile(path.resolve('node_modules/axe-core/axe.min.js'), 'utf8')
  await mkdir(SHOTS, { recursive: true })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
  await receiver?.close()
  await s3?.close()
})

interface Visit {
  page: Page
  /** Every console error and uncaught exception of the page, with the address it happened at. */
  errors: string[]
}

async function visit(context: BrowserContext): Promise<Visit> {
  const page = await context.newPage()
  const errors: string[] = []
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(`${page.url()}: ${message.text()}`)
  })
  page.on('pageerror', (error) => errors.push(`${page.url()}: ${error.message}`))
  await page.setViewportSize({ width: 1280, height: 800 })
  return { page, errors }
}

interface Violation {
  id: string
  impact: string | null
  help: string
  nodes: string[]
}

/** axe-core's serious and critical violations on the page as it is now. */
async function seriousViolations(page: Page): Promise<Violation[]> {
  // Evaluated, not added as a <script>: the console's policy refuses inline scripts.
  if (!(await page.evaluate(() => 'axe' in globalThis))) await page.evaluate(axeSource)
  return page.evaluate(async () => {
    type Result = { id: string; impact: string | null; help: string; nodes: { target: string[] }[] }
    const { axe } = globalThis as unknown as { axe: { run(): Promise<{ violations: Result[] }> } }
    const { violations } = await axe.run()
    return violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => ({
        id: v.id,
        impact: v.impact,
        help: v.help,
        nodes: v.nodes.map((n) => n.target.join(' ')),
      }))
  })
}

/**
 * The screen as it is, at 1280 and at 360 px: no serious or critical axe-core violation, nothing
 * wider than the window, and a screenshot of the whole page.
 */
async function checkScreen(page: Page, name: string) {
  for (const [width, height] of [
    [1280, 800],
    [360, 740],
  ] as const) {
    await page.setViewportSize({ width, height })
    // From the top: the sticky top bar would otherwise sit in the middle of a full-page shot; and
    // without the passing notices ("API key revoked"), which would cover what stays.
    await page.evaluate(`window.scrollTo(0, 0); document.getElementById('toast')?.replaceChildren()`)
    expect(await seriousViolations(page), `${name} at ${width} px`).toEqual([])
    expect(
      await page.evaluate<number>('document.documentElement.scrollWidth'),
      `${name} fits ${width} px`,
    ).toBeLessThanOrEqual(width)
    await page.screenshot({ path: path.join(SHOTS, `console-${name}-${width}.png`), fullPage: true })
  }
  await page.setViewportSize({ width: 1280, height: 800 })
}

/** The signed-in screens (the sign-in form stays in the page, hidden, with labels of its own). */
const inApp = (page: Page) => page.locator('#app')

const heading = (page: Page) => page.locator('#app h1').first().textContent()

async function openScreen(page: Page, label: string, title = label) {
  await page
    .getByRole('navigation', { name: 'Console' })
    .getByRole('link', { name: label, exact: true })
    .click()
  await expect.poll(() => heading(page)).toBe(title)
}

const navLinks = (page: Page) =>
  page.getByRole('navigation', { name: 'Console' }).getByRole('link').allTextContents()

const dialog = (page: Page) => page.getByRole('dialog')

/** The text of the toasts the page has shown so far and still shows. */
const toasts = (page: Page) => page.locator('#toast').textContent()

/** Buttons an admin has and a member never sees. */
const ADMIN_BUTTONS =
  /^(Approve|Invite|Make admin|Make member|Deactivate|Reactivate|Unlock|Resend invitation|Create API key|Revoke .*|Add endpoint|Send test|Rotate secret|Save entry)$/

const totpFor = (secret: string) =>
  new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 })

/** Turns two-factor on in the account screen; the TOTP generator of the new secret. */
async function setUpTwoFactor(page: Page) {
  await page.getByRole('button', { name: 'Set up' }).click()
  await expect.poll(() => page.locator('#otp-qr svg').count()).toBe(1)
  const secret = ((await page.locator('#otp-secret').textContent()) ?? '').replace('Secret: ', '').trim()
  const totp = totpFor(secret)
  await inApp(page)
    .getByLabel('Code from the app')
    .fill(totp.generate({ timestamp: t.clock.now().getTime() }))
  await page.getByRole('button', { name: 'Turn on' }).click()
  await expect.poll(() => page.locator('#backup-codes li').count()).toBe(10)
  return totp
}

describe('the console in Chromium', () => {
  it('shows a signed-out first visit the sign-in form, and /docs, without a console error', async () => {
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(base)
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    expect(await page.locator('#signin').isVisible()).toBe(true)
    expect(await page.locator('#nav').isVisible()).toBe(false)
    await checkScreen(page, 'sign-in')

    await page.goto(`${base}/docs`)
    await page.locator('.swagger-ui .information-container').waitFor()
    await page.locator('#operations-authentication-login').waitFor()
    await page.screenshot({ path: path.join(SHOTS, 'console-docs-1280.png') })
    expect(errors).toEqual([])
    await context.close()
  })

  it('walks every screen as an admin: sessions, two-factor, password, purchase requests, users, API keys, webhooks, audit, configuration, outbox', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const org = admin.organizationId
    const colleague = await newUser(t.app, { organizationId: org, email: uniqueEmail('colleague') })
    const lockedOut = await newUser(t.app, { organizationId: org, email: uniqueEmail('locked-out') })
    const { maxAttempts } = t.config.auth.lockout
    for (let i = 0; i < maxAttempts; i++) await login(t.app, lockedOut.email, 'not the password')
    // The admin is signed in on another device too, whose session is revoked from the list.
    await signIn(t.app, admin, { userAgent: FIREFOX_ON_WINDOWS })

    const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] })
    const { page, errors } = await visit(context)
    const uploads: string[] = []
    context.on('request', (request) => {
      if (request.method() === 'PUT') uploads.push(new URL(request.url()).origin)
    })
    await signInThroughConsole(page, base, admin)

    // Who and where: the header names the user, the organization and the role.
    await expect.poll(() => page.locator('#who').textContent()).toContain(admin.email)
    const orgName = (
      await t.app.db
        .selectFrom('organizations')
        .select('name')
        .where('id', '=', org)
        .executeTakeFirstOrThrow()
    ).name
    expect(await page.locator('#who').textContent()).toContain(orgName)
    expect(await page.locator('#who').textContent()).toContain('Admin')
    expect(await navLinks(page)).toEqual([
      'My account',
      'Purchase requests',
      'Users',
      'API keys',
      'Webhooks',
      'Audit events',
      'Security policies',
      'Single sign-on',
      'Configuration',
      'Outbox',
    ])

    // My account: sessions with their devices, the current one marked; revoke the other one.
    expect(await heading(page)).toBe('My account')
    await expect.poll(() => page.locator('#sessions tr').count()).toBe(2)
    const sessions = page.locator('#sessions tr')
    expect(await sessions.filter({ hasText: 'This device' }).textContent()).toMatch(/Chrome.* on Linux/)
    expect(await sessions.filter({ hasText: 'Firefox on Windows' }).count()).toBe(1)
    await checkScreen(page, 'account')
    await sessions.filter({ hasText: 'Firefox on Windows' }).getByRole('button', { name: 'Revoke' }).click()
    await expect.poll(() => page.locator('#sessions tr').count()).toBe(1)

    // Two-factor: set up with the QR code's secret, the backup codes shown once; then it is on.
    await setUpTwoFactor(page)
    await checkScreen(page, 'two-factor')
    await page.getByRole('button', { name: 'I have saved them' }).click()
    // An admin's role requires it (platform.auth.otp.required-for-roles): no "Turn off" that could only fail.
    await expect.poll(() => page.locator('#otp-section').textContent()).toContain('Your role requires')
    expect(await page.locator('#otp-section').getByRole('button', { name: 'Turn off' }).count()).toBe(0)
    expect(await page.locator('#otp-section .badge').textContent()).toBe('On')

    // Password change: the session stays, the password is the new one.
    await inApp(page).getByLabel('Current password').fill(admin.password)
    await inApp(page).getByLabel('New password', { exact: true }).fill(NEW_PASSWORD)
    await inApp(page).getByLabel('Repeat the new password').fill(NEW_PASSWORD)
    await page.getByRole('button', { name: 'Change password' }).click()
    await expect
      .poll(() => page.locator('#password-section').textContent())
      .toContain('Your password was changed')
    expect((await login(t.app, admin.email, admin.password)).statusCode).toBe(401)

    // Purchase requests: create, attach a file (straight to the store, with progress), submit,
    // approve, the PDF report and its download; only the steps the state allows are offered.
    await openScreen(page, 'Purchase requests')
    await inApp(page).getByLabel('Title').fill('New laptops')
    await page.getByRole('button', { name: 'Create', exact: true }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Draft')
    expect(await page.locator('#pr-detail-title').textContent()).toBe('New laptops')
    expect(await page.locator('#pr-actions button').allTextContents()).toEqual([
      'Submit for approval',
      'Create PDF report',
    ])
    // Every value the progress bar shows during the upload.
    await page.evaluate(`{
      const progress = document.getElementById('upload-progress')
      globalThis.progressSeen = []
      new MutationObserver(() => globalThis.progressSeen.push(progress.getAttribute('value'))).observe(progress, {
        attributes: true,
        attributeFilter: ['value'],
      })
    }`)
    await inApp(page)
      .getByLabel('Attach a file')
      .setInputFiles({
        name: 'offer.pdf',
        mimeType: 'application/pdf',
        buffer: Buffer.alloc(512 * 1024, '%PDF-1.7 offer '),
      })
    await expect.poll(() => page.locator('#attachments').textContent()).toContain('offer.pdf')
    expect(
      await page.evaluate(() => (globalThis as unknown as { progressSeen: string[] }).progressSeen),
    ).toContain('100')
    expect(uploads).toEqual([new URL(s3.endpoint).origin])
    await page.getByRole('button', { name: 'Submit for approval' }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Submitted')
    expect(await page.locator('#pr-actions button').allTextContents()).toEqual([
      'Approve',
      'Create PDF report',
    ])
    await page.getByRole('button', { name: 'Approve', exact: true }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Approved')
    expect(await page.locator('#pr-actions button').allTextContents()).toEqual(['Create PDF report'])
    await page.getByRole('button', { name: 'Create PDF report' }).click()
    await expect.poll(() => page.locator('#attachments li').count()).toBe(2)
    const download = page.waitForEvent('download')
    await page.getByRole('button', { name: /^Download purchase-request-.*\.pdf$/ }).click()
    expect((await download).suggestedFilename()).toMatch(/^purchase-request-.*\.pdf$/)
    expect(await page.locator('#pr-history li').count()).toBe(2)
    await checkScreen(page, 'purchase-request')
    await page.getByRole('link', { name: '← Purchase requests' }).click()
    await expect.poll(() => page.locator('#prs tr').count()).toBe(1)
    await inApp(page).getByLabel('Status').selectOption('DRAFT')
    await expect
      .poll(() => page.locator('#app .list-status').first().textContent())
      .toBe('No purchase requests here yet.')
    await inApp(page).getByLabel('Status').selectOption('APPROVED')
    await expect.poll(() => page.locator('#prs tr').count()).toBe(1)
    await checkScreen(page, 'purchase-requests')

    // Users: invite, resend the invitation, change a role, unlock, deactivate and reactivate.
    await openScreen(page, 'Users')
    const users = page.locator('#users tr')
    await expect.poll(() => users.count()).toBe(3)
    const invitee = uniqueEmail('invitee')
    await inApp(page).getByLabel('Email').fill(invitee)
    await page.getByRole('button', { name: 'Invite', exact: true }).click()
    const invited = users.filter({ hasText: invitee })
    await expect.poll(() => invited.textContent()).toContain('Invited')
    await invited.getByRole('button', { name: 'Resend invitation' }).click()
    await expect.poll(() => toasts(page)).toContain(`Invitation sent to ${invitee} again.`)

    const colleagueRow = users.filter({ hasText: colleague.email })
    await colleagueRow.getByRole('button', { name: 'Make admin' }).click()
    await dialog(page).getByRole('button', { name: 'Make admin' }).click()
    await expect.poll(() => colleagueRow.locator('td').nth(1).textContent()).toBe('Admin')

    const lockedRow = users.filter({ hasText: lockedOut.email })
    expect(await lockedRow.textContent()).toContain('Locked')
    await inApp(page).getByLabel('Status').selectOption('locked')
    await expect.poll(() => users.count()).toBe(1)
    await checkScreen(page, 'users-locked')
    await lockedRow.getByRole('button', { name: 'Unlock' }).click()
    await expect
      .poll(() => page.locator('#app .list-status').first().textContent())
      .toBe('No user in this state.')
    await inApp(page).getByLabel('Status').selectOption('')
    await expect.poll(() => lockedRow.textContent()).toContain('Active')
    expect((await login(t.app, lockedOut.email, lockedOut.password)).statusCode).toBe(200)
    await lockedRow.getByRole('button', { name: 'Deactivate' }).click()
    await dialog(page).getByRole('button', { name: 'Deactivate' }).click()
    await expect.poll(() => lockedRow.textContent()).toContain('Deactivated')
    await lockedRow.getByRole('button', { name: 'Reactivate' }).click()
    await expect.poll(() => lockedRow.textContent()).toContain('Active')
    expect(await users.filter({ hasText: admin.email }).getByRole('button').count()).toBe(0)
    await checkScreen(page, 'users')

    // API keys: create one (the raw key shown once, copied), use it, revoke it.
    await openScreen(page, 'API keys')
    await expect
      .poll(() => page.locator('#app .list-status').last().textContent())
      .toBe('No API key in this state.')
    expect(await inApp(page).locator('.notice').textContent()).toContain('Service accounts')
    await inApp(page).getByLabel('Description').fill('CRM sync')
    await inApp(page).getByLabel('purchase_requests:read').check()
    await inApp(page).getByLabel('files:read').check()
    await page.getByRole('button', { name: 'Create API key' }).click()
    const rawKey = await dialog(page).getByLabel('API key').inputValue()
    expect(rawKey).toMatch(/^sk_live_/)
    await dialog(page).getByRole('button', { name: 'Copy' }).click()
    await expect.poll(() => dialog(page).textContent()).toContain('Copied to the clipboard.')
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(rawKey)
    await checkScreen(page, 'api-key-created')
    await dialog(page).getByRole('button', { name: 'Done' }).click()
    const byKey = () =>
      t.app.inject({ method: 'GET', url: '/api/purchase-requests', headers: { 'x-api-key': rawKey } })
    expect((await byKey()).statusCode).toBe(200)
    const keyRow = page.locator('#api-keys tr', { hasText: 'CRM sync' })
    await expect.poll(() => keyRow.textContent()).toContain('Active')
    await checkScreen(page, 'api-keys')
    await keyRow.getByRole('button', { name: 'Revoke CRM sync' }).click()
    await dialog(page).getByRole('button', { name: 'Revoke' }).click()
    await expect.poll(() => page.locator('#api-keys tr').count()).toBe(0)
    expect((await byKey()).statusCode).toBe(401)
    await inApp(page).getByLabel('State').selectOption('revoked')
    await expect.poll(() => keyRow.textContent()).toContain('Revoked')

    // Webhooks: create for a chosen event (the whsec_ secret shown once), send a test and see it
    // delivered, a test the receiver refuses and given up on, rotate the secret, edit.
    await openScreen(page, 'Webhooks')
    await inApp(page).getByLabel('Endpoint URL').fill(`${receiver.url}/hooks`)
    await inApp(page).getByLabel('Description').fill('CRM')
    await inApp(page).getByLabel('Only the events I choose').check()
    await inApp(page).getByLabel('Purchase request approved').check()
    await page.getByRole('button', { name: 'Add endpoint' }).click()
    const secret = await dialog(page).getByLabel('Signing secret').inputValue()
    expect(secret).toMatch(/^whsec_/)
    await checkScreen(page, 'webhook-created')
    await dialog(page).getByRole('button', { name: 'Done' }).click()
    await expect.poll(() => page.locator('#webhooks').textContent()).toContain('Purchase request approved')
    await page.locator('#webhooks').getByRole('link', { name: 'CRM' }).click()
    await expect.poll(() => heading(page)).toBe('CRM')
    await expect
      .poll(() => inApp(page).locator('.list-status').last().textContent())
      .toContain('No delivery attempt yet')
    const attempts = page.locator('#deliveries tr')
    /** Sends a test ping from the page; resolves once the service has queued it. */
    const sendTest = async () => {
      const queued = page.waitForResponse(
        (r) => new URL(r.url()).pathname.endsWith('/test') && r.request().method() === 'POST',
      )
      await page.getByRole('button', { name: 'Send test' }).click()
      expect((await queued).status()).toBe(202)
    }
    await sendTest()
    await expect.poll(() => toasts(page)).toContain('Test event queued')
    await t.app.services.auditChainer.drain()
    await t.app.services.webhookWorker.runOnce()
    await page.getByRole('button', { name: 'Refresh' }).click()
    await expect.poll(() => attempts.count()).toBe(1)
    expect(await attempts.textContent()).toMatch(/HTTP 200.*Delivered/)
    receiver.answer(500)
    await sendTest()
    await t.app.services.auditChainer.drain()
    await t.app.services.webhookWorker.runOnce()
    await page.getByRole('button', { name: 'Refresh' }).click()
    await expect.poll(() => attempts.count()).toBe(2)
    expect(await attempts.first().textContent()).toMatch(/HTTP 500.*Gave up/)
    expect(receiver.received.filter((r) => r.path === '/hooks')).toHaveLength(2)
    await checkScreen(page, 'webhook')
    await page.getByRole('button', { name: 'Rotate secret' }).click()
    await dialog(page).getByRole('button', { name: 'Rotate secret' }).click()
    const rotated = await dialog(page).getByLabel('Signing secret').inputValue()
    expect(rotated).toMatch(/^whsec_/)
    expect(rotated).not.toBe(secret)
    await dialog(page).getByRole('button', { name: 'Done' }).click()
    await inApp(page).getByLabel('Description').fill('CRM (staging)')
    await page.getByRole('button', { name: 'Save changes' }).click()
    await expect.poll(() => heading(page)).toBe('CRM (staging)')
    await page.getByRole('link', { name: '← Webhooks' }).click()
    await expect.poll(() => page.locator('#webhooks').textContent()).toContain('CRM (staging)')
    await checkScreen(page, 'webhooks')

    // Audit events: filtered by type, and the export of the same filter.
    await openScreen(page, 'Audit events')
    const events = page.locator('#audit-events tr[data-type]')
    await expect.poll(() => events.count()).toBeGreaterThan(5)
    await inApp(page).getByLabel('Event type').fill('user.invited')
    await page.getByRole('button', { name: 'Apply filters' }).click()
    await expect.poll(() => events.count()).toBe(1)
    expect(await events.getAttribute('data-type')).toBe('user.invited')
    const exportHref = (await page.locator('#audit-export').getAttribute('href')) ?? ''
    expect(exportHref).toBe('/api/audit-events/export?type=user.invited')
    const exported = await page.evaluate(async (href) => (await fetch(href)).text(), exportHref)
    expect(
      exported
        .trim()
        .split('\n')
        .map((line) => (JSON.parse(line) as { type: string }).type),
    ).toEqual(['user.invited'])
    await page.getByRole('button', { name: 'Clear' }).click()
    await expect.poll(() => events.count()).toBeGreaterThan(5)
    await events
      .first()
      .getByRole('button', { name: /^Details of / })
      .click()
    await expect.poll(() => page.locator('#audit-events tr.detail-row:not([hidden])').count()).toBe(1)
    await checkScreen(page, 'audit')

    // Configuration: set two entries, remove one.
    await openScreen(page, 'Configuration')
    await expect.poll(() => page.locator('#app .list-status').last().textContent()).toContain('No entry yet')
    for (const [key, value] of [
      ['purchase_request.approval_email_subject', 'Approved: your request'],
      ['reports.footer', 'Acme Corp, purchasing'],
    ] as const) {
      await inApp(page).getByLabel('Key').fill(key)
      await inApp(page).getByLabel('Value').fill(value)
      await page.getByRole('button', { name: 'Save entry' }).click()
      await expect.poll(() => page.locator('#config').textContent()).toContain(value)
    }
    await page.getByRole('button', { name: 'Remove reports.footer' }).click()
    await dialog(page).getByRole('button', { name: 'Remove' }).click()
    await expect.poll(() => page.locator('#config tr').count()).toBe(1)
    await checkScreen(page, 'configuration')

    // Outbox: each queue's counts, read-only.
    await openScreen(page, 'Outbox')
    await expect.poll(() => page.locator('#outboxes .stat').count()).toBe(2)
    await expect.poll(() => page.locator('#dead-letters tbody tr').count()).toBe(1)
    expect(await page.locator('#dead-letters tbody tr').textContent()).toContain('Webhook')
    await checkScreen(page, 'outbox')

    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    expect(await page.locator('#app').innerHTML()).toBe('')
    expect(errors).toEqual([])
    await context.close()
  }, 180_000)

  it('shows a failure’s detail and code, never a bare status, and a list that failed to load offers to try again', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const existing = await newUser(t.app, { organizationId: admin.organizationId })
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await signInThroughConsole(page, base, admin)
    // The first listing of the users meets the service unavailable.
    let failures = 1
    await page.route(
      (url) => url.pathname === '/api/users',
      async (route) => {
        if (route.request().method() !== 'GET' || failures-- <= 0) return route.continue()
        return route.fulfill({
          status: 503,
          contentType: 'application/problem+json',
          headers: { 'retry-after': '5' },
          body: JSON.stringify({
            type: 'about:blank',
            title: 'Service unavailable',
            status: 503,
            detail: 'The database is not reachable; try again in a few seconds',
            code: 'SERVICE_UNAVAILABLE',
          }),
        })
      },
    )
    await openScreen(page, 'Users')
    await expect
      .poll(() => page.locator('#users-error').textContent())
      .toBe('The database is not reachable; try again in a few seconds (SERVICE_UNAVAILABLE)')
    expect(await inApp(page).locator('.list-status').last().textContent()).toContain(
      'The users could not be loaded.',
    )
    await checkScreen(page, 'users-failed')
    await page.getByRole('button', { name: 'Try again' }).click()
    await expect.poll(() => page.locator('#users tr').count()).toBe(2)
    expect(await page.locator('#users-error').textContent()).toBe('')

    // An invitation for an address that has an account: the service's reason, with its code.
    await inApp(page).getByLabel('Email').fill(existing.email)
    await page.getByRole('button', { name: 'Invite', exact: true }).click()
    const refusal = page.locator('#invite-form').locator('xpath=..').getByRole('alert')
    await expect.poll(() => refusal.textContent()).toMatch(/^\S.* \([A-Z_]+\)$/)
    expect(await refusal.textContent()).not.toMatch(/\b409\b/)
    // Only the browser's own notes of the two answers that were not 2xx.
    expect(
      errors.every((e) => /Failed to load resource: the server responded with a status of (503|409)/.test(e)),
    ).toBe(true)
    expect(errors).toHaveLength(2)
    await context.close()
  })

  it('offers a purchase request’s steps the service allows (POST /api/authz/check), and shows the service’s refusal of a step', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const adminSession = await signIn(t.app, admin)
    const asAdmin = (method: 'POST', url: string, payload?: object) =>
      t.app.inject({ method, url, cookies: { access_token: adminSession.access }, payload })
    const created = await asAdmin('POST', '/api/purchase-requests', { title: 'Ergonomic keyboards' })
    const id = created.json().id as string
    expect((await asAdmin('POST', `/api/purchase-requests/${id}/submit`)).statusCode).toBe(200)

    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    // The permission checks the page asks, with the service's answers; `override` stands in for the
    // service's answer when set.
    const checks: { body: unknown; allowed: boolean }[] = []
    let override: boolean | undefined
    await page.route(
      (url) => url.pathname === '/api/authz/check',
      async (route) => {
        const body = route.request().postDataJSON()
        if (override !== undefined) {
          checks.push({ body, allowed: override })
          return route.fulfill({ status: 200, json: { allowed: override } })
        }
        const answer = await route.fetch()
        const { allowed } = (await answer.json()) as { allowed: boolean }
        checks.push({ body, allowed })
        return route.fulfill({ response: answer })
      },
    )
    const actions = () => page.locator('#pr-actions button').allTextContents()
    const open = async () => {
      await page.evaluate(`location.hash = '#/account'`)
      await expect.poll(() => heading(page)).toBe('My account')
      await page.evaluate(`location.hash = '#/purchase-requests/${id}'`)
      // Three answers (the request, its history, the permission check) before the status shows.
      await expect.poll(() => page.locator('#pr-status').textContent(), { timeout: 10_000 }).toBe('Submitted')
    }

    // A member: the service says no to can_edit, so no approval and no upload are offered.
    await signInThroughConsole(page, base, member)
    await expect.poll(() => page.locator('#who').textContent()).toContain('Member')
    await open()
    expect(checks).toEqual([
      { body: { relation: 'can_edit', objectType: 'purchase_request', objectId: id }, allowed: false },
    ])
    expect(await actions()).toEqual(['Create PDF report'])
    expect(await page.locator('#attach').count()).toBe(0)
    expect(await inApp(page).textContent()).toContain('Waiting for approval, which you may not give.')

    // Had the service said yes, the member would be offered Approve and the upload: the console
    // follows the answer. Approving then meets the service's own refusal, shown with its code.
    override = true
    await open()
    expect(await actions()).toEqual(['Approve', 'Create PDF report'])
    expect(await page.locator('#attach').count()).toBe(1)
    await page.getByRole('button', { name: 'Approve', exact: true }).click()
    await expect
      .poll(() => page.locator('#error-pr').textContent())
      .toBe('You may not approve this purchase request (ACCESS_DENIED)')
    expect(await page.locator('#pr-status').textContent()).toBe('Submitted')
    // The navigation never followed the permission check: a member has no organization screens.
    expect(await navLinks(page)).toEqual(['My account', 'Purchase requests'])
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')

    // An admin whom the service told no is offered no Approve either: the answer decides, not the role.
    override = false
    await signInThroughConsole(page, base, admin)
    await open()
    expect(await actions()).toEqual(['Create PDF report'])
    expect(await page.locator('#attach').count()).toBe(0)
    // Nor does it for an admin: the organization's screens follow the role of the account record
    // (GET /api/auth/me), as the service's account administration does.
    expect(await navLinks(page)).toContain('Users')

    // With the service's real answer, Approve is offered; the request is approved elsewhere before
    // the click: the 409 is shown, and the page shows the request as it now is.
    override = undefined
    await open()
    expect(await actions()).toEqual(['Approve', 'Create PDF report'])
    expect(await page.locator('#attach').count()).toBe(1)
    expect((await asAdmin('POST', `/api/purchase-requests/${id}/approve`)).statusCode).toBe(200)
    await page.getByRole('button', { name: 'Approve', exact: true }).click()
    await expect
      .poll(() => page.locator('#error-pr').textContent())
      .toBe('An APPROVED purchase request cannot be approved (INVALID_TRANSITION)')
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Approved')
    expect(await actions()).toEqual(['Create PDF report'])
    await checkScreen(page, 'purchase-request-refused')

    // Only the browser's own notes of the two refusals.
    expect(errors).toHaveLength(2)
    expect(
      errors.every((e) => /Failed to load resource: the server responded with a status of (403|409)/.test(e)),
    ).toBe(true)
    await context.close()
  }, 120_000)

  it('shows what the service answers as text, never as markup: the account, and the QR code drawn from its shapes only', async () => {
    const member = await newUser(t.app)
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    const requested: string[] = []
    context.on('request', (request) => requested.push(new URL(request.url()).pathname))
    const hostileEmail = '<img src=x onerror="globalThis.pwned=1">mallory@example.com'
    const hostileOrganization = '<b>Acme</b><img src=x onerror="globalThis.pwned=2">'
    await page.route(
      (url) => url.pathname === '/api/auth/me',
      async (route) => {
        const answer = await route.fetch()
        const me = await answer.json()
        return route.fulfill({
          response: answer,
          json: { ...me, email: hostileEmail, organizationName: hostileOrganization },
        })
      },
    )
    // The setup's SVG, with what a QR code never holds put into it; then text that is no SVG at all.
    let qrCodeSvg = (svg: string) =>
      svg
        .replace('<svg ', '<svg onload="globalThis.pwned=3" ')
        .replace(
          '</svg>',
          '<script>globalThis.pwned=4</script>' +
            '<foreignObject><img xmlns="http://www.w3.org/1999/xhtml" src="x" onerror="globalThis.pwned=5"/></foreignObject>' +
            '<a href="javascript:globalThis.pwned=6"><rect width="9" height="9"/></a>' +
            '<path d="M0 0h1" fill="url(https://example.com/x.svg#p)" onclick="globalThis.pwned=7"/></svg>',
        )
    await page.route(
      (url) => url.pathname === '/api/auth/otp/setup',
      async (route) => {
        const answer = await route.fetch()
        const setup = await answer.json()
        return route.fulfill({ response: answer, json: { ...setup, qrCodeSvg: qrCodeSvg(setup.qrCodeSvg) } })
      },
    )
    await signInThroughConsole(page, base, member)
    await expect.poll(() => page.locator('#who .who-email').textContent()).toBe(hostileEmail)
    expect(await page.locator('#who .who-org').textContent()).toContain(hostileOrganization)
    await expect.poll(() => inApp(page).textContent()).toContain(hostileEmail)
    expect(await inApp(page).textContent()).toContain(hostileOrganization)
    expect(await page.locator('img, b').count()).toBe(0)

    await page.getByRole('button', { name: 'Set up' }).click()
    await expect.poll(() => page.locator('#otp-qr svg').count()).toBe(1)
    const qr = page.locator('#otp-qr')
    // The QR code's own paths are drawn; nothing else of the answer is in the page.
    expect(await qr.locator('path').count()).toBeGreaterThan(1)
    expect(await qr.locator('script, foreignObject, img, a, rect').count()).toBe(0)
    const attributes = await qr.evaluate((element) =>
      [...element.querySelectorAll('*')].flatMap((node) =>
        [...node.attributes].map((a) => `${a.name}=${a.value}`),
      ),
    )
    expect(attributes.filter((a) => /^on|url\(|javascript:/i.test(a))).toEqual([])
    expect(await page.locator('#otp-qr svg').getAttribute('aria-label')).toBe(
      'QR code of the secret, for the authenticator app',
    )
    expect(await page.locator('#otp-secret').textContent()).toMatch(/^Secret: [A-Z2-7]+$/)
    await checkScreen(page, 'two-factor-qr')

    qrCodeSvg = () => '<img src=x onerror="globalThis.pwned=8">'
    await page.getByRole('button', { name: 'Cancel' }).click()
    await page.getByRole('button', { name: 'Set up' }).click()
    await expect
      .poll(() => qr.textContent())
      .toBe('The QR code could not be shown: type the secret into the app.')
    expect(await page.locator('img').count()).toBe(0)
    expect(await page.locator('#otp-secret').textContent()).toMatch(/^Secret: [A-Z2-7]+$/)

    expect(await page.evaluate('globalThis.pwned')).toBeUndefined()
    // Nothing was loaded from the answers: an <img src=x> in the page would have asked for /x.
    expect(requested.filter((pathname) => pathname === '/x')).toEqual([])
    // Parsing the hostile answer (into a document of its own, whence only shapes are copied) makes
    // the browser check its inline handlers, and the inline styles of its report on text that is no
    // XML, against the page's policy: those refusals are all the page logs.
    const refused =
      /violates the following Content Security Policy directive .* The action has been blocked\.$/
    expect(errors.filter((error) => !refused.test(error))).toEqual([])
    await context.close()
  }, 60_000)

  it('walks a member through their account and purchase requests, with no admin screen and no admin button', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member: TestUser = await newUser(t.app, { organizationId: admin.organizationId })
    // The admin's requests: more than a page of them, the newest waiting for approval.
    const adminSession = await signIn(t.app, admin)
    const create = (title: string) =>
      t.app.inject({
        method: 'POST',
        url: '/api/purchase-requests',
        cookies: { access_token: adminSession.access },
        payload: { title },
      })
    for (let i = 1; i <= 20; i++) expect((await create(`Office chair ${i}`)).statusCode).toBe(201)
    // One millisecond later: the list is newest first.
    t.clock.advance(1)
    const desks = (await create('Standing desks')).json().id as string
    await t.app.inject({
      method: 'POST',
      url: `/api/purchase-requests/${desks}/submit`,
      cookies: { access_token: adminSession.access },
    })

    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    const noAdminButton = async () =>
      expect(await page.getByRole('button', { name: ADMIN_BUTTONS }).allTextContents()).toEqual([])
    await signInThroughConsole(page, base, member)
    await expect.poll(() => page.locator('#who').textContent()).toContain('Member')
    expect(await navLinks(page)).toEqual(['My account', 'Purchase requests'])
    // An organization's screen asked for by address is not shown.
    await page.evaluate(`location.hash = '#/users'`)
    await expect.poll(() => page.evaluate('location.hash')).toBe('#/account')
    expect(await heading(page)).toBe('My account')

    // Two-factor on, then off again (a member's role does not require it).
    await expect.poll(() => page.locator('#sessions tr').count()).toBe(1)
    await setUpTwoFactor(page)
    await page.getByRole('button', { name: 'I have saved them' }).click()
    await page.getByRole('button', { name: 'Turn off' }).click()
    await dialog(page).getByRole('button', { name: 'Turn off' }).click()
    await expect.poll(() => page.locator('#otp-section .badge').textContent()).toBe('Off')
    await noAdminButton()
    await checkScreen(page, 'member-account')

    // The admin's submitted request: no approval, no upload, the report. The list is paged.
    await openScreen(page, 'Purchase requests')
    const rows = page.locator('#prs tr')
    await expect.poll(() => rows.count()).toBe(20)
    expect(await rows.first().textContent()).toContain('Standing desks')
    await page.getByRole('button', { name: 'Load more' }).click()
    await expect.poll(() => rows.count()).toBe(21)
    expect(await page.getByRole('button', { name: 'Load more' }).isVisible()).toBe(false)
    expect(await page.locator('#app .list-status').last().textContent()).toBe('21 purchase requests')
    await page.getByRole('link', { name: 'Standing desks' }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Submitted')
    expect(await page.locator('#pr-actions button').allTextContents()).toEqual(['Create PDF report'])
    expect(await page.locator('#attach').count()).toBe(0)
    await page.getByRole('button', { name: 'Create PDF report' }).click()
    await expect.poll(() => page.locator('#attachments li').count()).toBe(1)
    await noAdminButton()
    await checkScreen(page, 'member-purchase-request')

    // Their own request: they may submit it, not approve it.
    await page.getByRole('link', { name: '← Purchase requests' }).click()
    t.clock.advance(1)
    await inApp(page).getByLabel('Title').fill('Headsets')
    await page.getByRole('button', { name: 'Create', exact: true }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Draft')
    await page.getByRole('button', { name: 'Submit for approval' }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Submitted')
    expect(await page.locator('#pr-actions button').allTextContents()).toEqual(['Create PDF report'])
    await page.getByRole('link', { name: '← Purchase requests' }).click()
    await expect.poll(() => rows.count()).toBe(20)
    expect(await rows.first().textContent()).toContain('Headsets')
    await noAdminButton()
    await checkScreen(page, 'member-purchase-requests')

    // By keyboard: a link of the navigation opens its screen and puts the focus on its heading.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'My account' }).focus()
    await page.keyboard.press('Enter')
    await expect.poll(() => page.evaluate('document.activeElement?.tagName')).toBe('H1')
    expect(await heading(page)).toBe('My account')

    // At 360 px the navigation is a menu under the top bar.
    await page.setViewportSize({ width: 360, height: 740 })
    const nav = page.getByRole('navigation', { name: 'Console' })
    expect(await nav.isVisible()).toBe(false)
    await page.getByRole('button', { name: 'Menu' }).click()
    expect(await page.getByRole('button', { name: 'Menu' }).getAttribute('aria-expanded')).toBe('true')
    expect(await nav.isVisible()).toBe(true)
    expect(await seriousViolations(page)).toEqual([])
    await page.screenshot({ path: path.join(SHOTS, 'console-member-menu-360.png') })
    await nav.getByRole('link', { name: 'Purchase requests' }).click()
    await expect.poll(() => heading(page)).toBe('Purchase requests')
    expect(await nav.isVisible()).toBe(false)

    expect(errors).toEqual([])
    await context.close()
  }, 120_000)
})
