import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import { Secret, TOTP } from 'otpauth'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import { SmtpTransport } from '../src/mail/transports.ts'
import { ACCOUNT_TEST_CONFIG, deliverMail, mailsTo, newUser } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import {
  callThroughClient,
  launchChromium,
  type PagePlatform,
  recordRefreshes,
  recordRefreshRequests,
  sessionHintOf,
  signInThroughConsole,
  stateOf,
} from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'
import { ownedResource } from './helpers/files.ts'
import { startTestS3, type TestS3 } from './helpers/s3.ts'
import { TestSmtpServer } from './helpers/smtp.ts'

// The browser half, in real headless Chromium against a real server with the
// demo console and the embedded S3 server: what the cookies, the typed client and the console do
// in a browser, with two tabs where it matters. Chromium: CHROMIUM_PATH, else Debian's
// /usr/bin/chromium (.ci/run installs it). Screenshots go to test-results/browser/.

const SHOTS = path.resolve('test-results/browser')

let t: TestApp
let s3: TestS3
let smtp: TestSmtpServer
let transport: SmtpTransport
let browser: Browser
let base: string

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  s3 = await startTestS3({ allowedOrigins: [base] })
  smtp = await TestSmtpServer.start()
  transport = new SmtpTransport(smtp.url)
  t = await createTestApp({
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      ...s3.config,
      'platform.web.public-url': base,
      'platform.auth.rate-limit.refresh-per-minute': '1000',
    },
    deps: { console: true, mailTransport: transport },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  browser = await launchChromium()
  await mkdir(SHOTS, { recursive: true })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
  await s3?.close()
  await transport?.close()
  await smtp?.close()
})

describe('in Chromium', () => {
  it('signs in with cookies page scripts cannot read, and restores the session on reload with one refresh', async () => {
    const context = await browser.newContext()
    const refreshes = recordRefreshes(context)
    const page = await context.newPage()
    const user = await newUser(t.app, { role: 'admin' })
    await signInThroughConsole(page, base, user)
    expect(await page.evaluate('document.cookie')).toBe('')
    const cookies = await context.cookies()
    expect(cookies.find((c) => c.name === 'access_token')).toMatchObject({ httpOnly: true })
    expect(cookies.find((c) => c.name === 'refresh_token')).toMatchObject({
      httpOnly: true,
      path: '/api/auth',
    })
    await page.screenshot({ path: path.join(SHOTS, 'signed-in.png'), fullPage: true })
    // The sign of a session that makes the next page's restoreSession() ask the service.
    expect(await sessionHintOf(page)).not.toBeNull()

    refreshes.length = 0
    await page.reload()
    await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
    await expect.poll(() => refreshes).toEqual([{ status: 200 }])
    await context.close()
  })

  it('forgets the session at logout: the next page is signed out without sending a refresh', async () => {
    const context = await browser.newContext()
    const refreshRequests = recordRefreshRequests(context)
    const page = await context.newPage()
    await signInThroughConsole(page, base, await newUser(t.app))
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    expect(await sessionHintOf(page)).toBeNull()
    await page.reload()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    expect(await stateOf(page)).toBe('signed-out')
    expect(refreshRequests).toEqual([])
    await context.close()
  })

  it('refreshes an expired access token and retries the call without the user noticing', async () => {
    const context = await browser.newContext()
    const refreshes = recordRefreshes(context)
    const page = await context.newPage()
    await signInThroughConsole(page, base, await newUser(t.app))
    refreshes.length = 0
    t.clock.advanceSeconds(13 * 60) // past the 12-minute access token
    expect(await callThroughClient(page)).toBe(200)
    await expect.poll(() => refreshes).toEqual([{ status: 200 }])
    expect(await stateOf(page)).toBe('signed-in')
    await context.close()
  })

  it('sends a wrong current password once: a 401 about what the call carried is not refreshed and retried', async () => {
    const context = await browser.newContext()
    const refreshes = recordRefreshes(context)
    const changes: string[] = []
    context.on('request', (request) => {
      if (request.url().endsWith('/api/auth/password/change')) changes.push(request.method())
    })
    const page = await context.newPage()
    await signInThroughConsole(page, base, await newUser(t.app))
    refreshes.length = 0
    const answer = await page.evaluate(async () => {
      const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
        .platformConsole
      const result = await platform.api.POST('/api/auth/password/change', {
        body: { currentPassword: 'not the password at all', newPassword: 'a brand new long passphrase' },
      })
      return { status: result.response.status, code: (result.error as { code?: string } | undefined)?.code }
    })
    expect(answer).toEqual({ status: 401, code: 'INVALID_CREDENTIALS' })
    expect(changes).toEqual(['POST'])
    expect(refreshes).toEqual([])
    await context.close()
  })

  it('serialises the refreshes of two tabs firing 20 calls each: no reuse, both stay signed in', async () => {
    const context = await browser.newContext()
    const refreshes = recordRefreshes(context)
    const first = await context.newPage()
    await signInThroughConsole(first, base, await newUser(t.app))
    const second = await context.newPage()
    await second.goto(base)
    await expect.poll(() => second.locator('#who').textContent()).toContain('Signed in')
    refreshes.length = 0
    t.clock.advanceSeconds(13 * 60)
    const fire = (page: Page) =>
      page.evaluate(async () => {
        const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
          .platformConsole
        const results = await Promise.all(
          Array.from({ length: 20 }, () => platform.api.GET('/api/auth/sessions')),
        )
        return results.map((r) => r.response.status)
      })
    const [a, b] = await Promise.all([fire(first), fire(second)])
    expect([...a, ...b].every((status) => status === 200)).toBe(true)
    await expect.poll(() => refreshes.length).toBeGreaterThanOrEqual(1)
    expect(refreshes.filter((r) => r.code === 'REFRESH_TOKEN_REUSED')).toEqual([])
    expect(refreshes.length).toBeGreaterThanOrEqual(1)
    expect(refreshes.every((r) => r.status === 200)).toBe(true)
    expect([await stateOf(first), await stateOf(second)]).toEqual(['signed-in', 'signed-in'])
    await context.close()
  })

  it('signs out both tabs when one of them detects a reused refresh token', async () => {
    const context = await browser.newContext()
    const first = await context.newPage()
    await signInThroughConsole(first, base, await newUser(t.app))
    const second = await context.newPage()
    await second.goto(base)
    await expect.poll(() => second.locator('#who').textContent()).toContain('Signed in')
    // A stolen copy of the current refresh cookie, presented after the tabs rotated it.
    const stolen = (await context.cookies()).find((c) => c.name === 'refresh_token')
    if (!stolen) throw new Error('no refresh cookie')
    await first.evaluate(async () => {
      const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
        .platformConsole
      await platform.refresh()
    })
    await context.addCookies([stolen])
    await first.evaluate(async () => {
      const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
        .platformConsole
      // Another tab refreshed long ago: this refresh really goes out, with the stolen cookie.
      localStorage.removeItem('platform:refreshed-at')
      await platform.refresh()
    })
    await expect.poll(() => first.locator('#who').textContent()).toContain('used elsewhere')
    await expect.poll(() => second.locator('#who').textContent()).toContain('used elsewhere')
    await context.close()
  })

  it('uploads a file from the page straight to S3 with progress, confirms it and downloads its bytes', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const user = await newUser(t.app, { role: 'admin' })
    const resourceId = await ownedResource(t.app, user.organizationId)
    await signInThroughConsole(page, base, user)
    const puts: string[] = []
    context.on('request', (request) => {
      if (request.method() === 'PUT') puts.push(new URL(request.url()).origin)
    })
    const bytes = Buffer.alloc(256 * 1024, 'quote ')
    const record = await page.evaluate(
      async ({ resourceId, content }) => {
        const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
          .platformConsole
        const progress: number[] = []
        const file = await platform.upload({
          resourceType: 'purchase_request',
          resourceId,
          file: new Blob([content], { type: 'text/plain' }),
          fileName: 'quote.txt',
          onProgress: (sent: number) => progress.push(sent),
        })
        return { file, progress }
      },
      { resourceId, content: bytes.toString() },
    )
    expect(record.file).toMatchObject({ status: 'CONFIRMED', sizeBytes: bytes.length, fileName: 'quote.txt' })
    expect(record.progress.length).toBeGreaterThan(0)
    expect(record.progress.at(-1)).toBe(bytes.length)
    // The bytes went to the store's origin, never to the service.
    expect(puts).toEqual([new URL(s3.endpoint).origin])
    const link = await page.evaluate(async (fileId) => {
      const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
        .platformConsole
      const result = await platform.api.GET('/api/storage/files/{fileId}/download-url', {
        params: { path: { fileId } },
      })
      return result.data.downloadUrl as string
    }, record.file.id)
    const downloaded = await fetch(link)
    expect(Buffer.from(await downloaded.arrayBuffer()).equals(bytes)).toBe(true)
    await context.close()
  })

  it('runs the console journey: create, submit and approve a purchase request, with an attachment', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const user = await newUser(t.app, { role: 'admin' })
    await signInThroughConsole(page, base, user)
    await page.getByRole('link', { name: 'Purchase requests' }).click()
    await page.getByLabel('Title').fill('New laptops')
    await page.getByRole('button', { name: 'Create', exact: true }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Draft')
    expect(await page.locator('#pr-detail-title').textContent()).toBe('New laptops')
    await page.locator('#attach').setInputFiles({
      name: 'offer.pdf',
      mimeType: 'application/pdf',
      buffer: Buffer.from('%PDF-1.7 offer'),
    })
    await expect.poll(() => page.locator('#attachments').textContent()).toContain('offer.pdf')
    await page.getByRole('button', { name: 'Submit for approval' }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Submitted')
    await page.getByRole('button', { name: 'Approve' }).click()
    await expect.poll(() => page.locator('#pr-status').textContent()).toBe('Approved')
    expect(await page.locator('#pr-history li').count()).toBe(2)
    expect(await page.locator('#error').textContent()).toBe('')
    await page.screenshot({ path: path.join(SHOTS, 'purchase-request.png'), fullPage: true })
    // The approval email reaches the creator over SMTP.
    await deliverMail(t)
    const mails = await mailsTo(smtp, user.email)
    expect(mails.map((mail) => mail.subject)).toContain('Purchase request approved: New laptops')
    await context.close()
  })

  it('turns on two-factor in the console, shows the backup codes once, and signs in with a code', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const user = await newUser(t.app)
    await signInThroughConsole(page, base, user)
    await page.getByRole('button', { name: 'Set up' }).click()
    await expect.poll(() => page.locator('#otp-qr svg').count()).toBe(1)
    const secret = ((await page.locator('#otp-secret').textContent()) ?? '').replace('Secret: ', '')
    const totp = new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 })
    await page.getByLabel('Code from the app').fill(totp.generate({ timestamp: t.clock.now().getTime() }))
    await page.getByRole('button', { name: 'Turn on' }).click()
    await expect
      .poll(() => page.locator('#backup-codes').textContent())
      .toContain('Backup codes (shown once)')
    await page.screenshot({ path: path.join(SHOTS, 'two-factor.png'), fullPage: true })
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')

    // Without the code the sign-in is refused with the catalogue's code; with it, it works.
    await page.getByLabel('Email').first().fill(user.email)
    await page.getByLabel('Password').fill(user.password)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await expect.poll(() => page.locator('#error').textContent()).toContain('OTP_REQUIRED')
    t.clock.advanceSeconds(30) // a code not used before
    await page.getByLabel('One-time code').fill(totp.generate({ timestamp: t.clock.now().getTime() }))
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
    await context.close()
  })

  it("revokes another device's session from the sessions list; that device is signed out at its next refresh", async () => {
    const user = await newUser(t.app)
    const laptop = await browser.newContext({ userAgent: 'Laptop browser' })
    const phone = await browser.newContext({ userAgent: 'Phone browser' })
    const onLaptop = await laptop.newPage()
    const onPhone = await phone.newPage()
    await signInThroughConsole(onPhone, base, user)
    await signInThroughConsole(onLaptop, base, user)
    await expect.poll(() => onLaptop.locator('#sessions tr').count()).toBe(2)
    await expect.poll(() => onLaptop.locator('#sessions').textContent()).toContain('Phone browser')
    await onLaptop.screenshot({ path: path.join(SHOTS, 'sessions.png'), fullPage: true })
    await onLaptop
      .locator('#sessions tr', { hasText: 'Phone browser' })
      .getByRole('button', { name: 'Revoke' })
      .click()
    await expect.poll(() => onLaptop.locator('#sessions tr').count()).toBe(1)
    const phoneRefreshes = recordRefreshRequests(phone)
    await onPhone.reload()
    await expect.poll(() => onPhone.locator('#who').textContent()).toBe('Signed out')
    expect(phoneRefreshes).toHaveLength(1)
    // The refused refresh removed the sign of a session: the phone's next page asks nothing.
    expect(await sessionHintOf(onPhone)).toBeNull()
    await onPhone.reload()
    await expect.poll(() => onPhone.locator('#who').textContent()).toBe('Signed out')
    expect(phoneRefreshes).toHaveLength(1)
    await laptop.close()
    await phone.close()
  })

  it('renders /docs, whose "Try it out" signs in', async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    const user = await newUser(t.app)
    await page.goto(`${base}/docs`)
    const login = page.locator('#operations-authentication-login')
    await login.locator('.opblock-summary').click()
    await login.getByRole('button', { name: 'Try it out' }).click()
    await login
      .locator('textarea.body-param__text')
      .fill(JSON.stringify({ username: user.email, password: user.password }))
    await login.getByRole('button', { name: 'Execute' }).click()
    await expect
      .poll(() => login.locator('.live-responses-table tbody .response-col_status').first().textContent())
      .toContain('200')
    const names = (await context.cookies()).map((c) => c.name).sort()
    expect(names).toEqual(['access_token', 'refresh_token'])
    await page.screenshot({ path: path.join(SHOTS, 'docs.png'), fullPage: true })
    await context.close()
  })
})
