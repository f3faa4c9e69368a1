import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import type { ParsedMail } from 'mailparser'
import { Secret, TOTP } from 'otpauth'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import { SmtpTransport } from '../src/mail/transports.ts'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  deliverMail,
  login,
  mailsTo,
  newUser,
  requestPasswordReset,
  signIn,
  uniqueEmail,
} from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { launchChromium, seriousViolations, signInThroughConsole } from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'
import { EMAIL_PROOF_CONFIG, PAGES } from './helpers/email-proofs.ts'
import { TestSmtpServer } from './helpers/smtp.ts'

// Sign-up, email sign-in, email change and the pages mailed links open, as people meet them in the
// console: real headless Chromium against the app listening on a port, its mail sent over SMTP to a
// real server the test reads. The mailed links point at the app itself (platform.web.frontend-url),
// so the test opens exactly the address the mail carries. Opening a link shows its page and a
// button; only the button uses the link. Each screen shown is checked at 1280 and 360 px (axe-core
// finds no serious or critical violation, nothing is wider than the window) and kept as a
// screenshot in test-results/browser/sign-up-<screen>-<width>.png (ignored).

const SHOTS = path.resolve('test-results/browser')
const NEW_PASSWORD = 'a new and longer passphrase'

let t: TestApp
let smtp: TestSmtpServer
let transport: SmtpTransport
let browser: Browser
let base: string

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  smtp = await TestSmtpServer.start()
  transport = new SmtpTransport(smtp.url)
  t = await createTestApp({
    // Near real time: the cookies' lifetimes follow the app's clock, and the browser's.
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      ...EMAIL_PROOF_CONFIG,
      'platform.web.public-url': base,
      'platform.web.frontend-url': base,
    },
    deps: { console: true, mailTransport: transport },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  browser = await launchChromium()
  await mkdir(SHOTS, { recursive: true })
}, 120_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
  await transport?.close()
  await smtp?.close()
})

interface Visit {
  page: Page
  /** Every console error and uncaught exception of the page. */
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

/**
 * The screen as it is, at 1280 and at 360 px: no serious or critical axe-core violation, nothing
 * wider than the window, and a screenshot of the whole page.
 */
async function shot(page: Page, name: string) {
  for (const [width, height] of [
    [1280, 800],
    [360, 740],
  ] as const) {
    await page.setViewportSize({ width, height })
    expect(await seriousViolations(page), `${name} at ${width} px`).toEqual([])
    expect(
      await page.evaluate<number>('document.documentElement.scrollWidth'),
      `${name} fits ${width} px`,
    ).toBeLessThanOrEqual(width)
    await page.screenshot({ path: path.join(SHOTS, `sign-up-${name}-${width}.png`), fullPage: true })
  }
  await page.setViewportSize({ width: 1280, height: 800 })
}

/** Polls until the page settles: the machine the tests share may be slow to answer. */
const poll = <T>(fn: () => Promise<T> | T) => expect.poll(fn, { timeout: 15_000, interval: 100 })

const heading = (page: Page) => page.locator('h1:visible').first().textContent()

const who = (page: Page) => page.locator('#who').textContent()

interface Mailed {
  /** The link exactly as the mail carries it. */
  link: string
  code: string
}

/** The newest mail to the address once the outbox has delivered it, with the link to `page` and the code. */
async function proofMailTo(address: string, page: string): Promise<Mailed> {
  let mail: ParsedMail | undefined
  await poll(async () => {
    await deliverMail(t)
    mail = (await mailsTo(smtp, address)).at(-1)
    return mail?.text ?? ''
  }).toContain(`${base}${page}?token=`)
  const text = mail?.text ?? ''
  const link = [...text.matchAll(/https?:\/\/[^\s<>"]+/g)]
    .map(([href]) => href)
    .find((href) => new URL(href).pathname === page)
  const code = /\b(\d{6})\b/.exec(text)?.[1]
  expect(link).toBeDefined()
  expect(code).toMatch(/^\d{6}$/)
  return { link: link ?? '', code: code ?? '' }
}

/** Fills and sends the console's sign-up form; the screen then says to check the mail. */
async function signUpInConsole(page: Page, email: string, organizationName: string) {
  await page.goto(base)
  await page.getByRole('link', { name: 'Create an organization' }).click()
  await poll(() => heading(page)).toBe('Create an organization')
  const form = page.locator('#sign-up-form')
  await form.getByLabel('Email', { exact: true }).fill(email)
  await form.getByLabel('Password', { exact: true }).fill(NEW_PASSWORD)
  await form.getByLabel('Organization name').fill(organizationName)
  await page.getByRole('button', { name: 'Create the organization' }).click()
  await poll(() => heading(page)).toBe('Check your email')
}

/** The header of a signed-in console: email, organization and role. */
async function expectSignedIn(page: Page, email: string, organization: string, role: 'Admin' | 'Member') {
  await poll(() => page.locator('.who-email').textContent()).toBe(email)
  expect(await page.locator('.who-org').textContent()).toContain(organization)
  expect(await page.locator('.who-org .badge').textContent()).toBe(role)
  await poll(() => page.locator('#app h1').first().textContent()).toBe('My account')
}

describe('sign-up in the console', () => {
  it('signs up, opens the mailed link (which uses nothing until its button), and lands signed in as the new organization admin', async () => {
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    const email = uniqueEmail('founder')
    const organization = `Founders ${email.slice(8, 16)}`

    await page.goto(base)
    await shot(page, 'sign-in')
    await signUpInConsole(page, email, organization)
    expect(await page.locator('#outside').textContent()).toContain(email)
    await shot(page, 'check-mail')
    const mailed = await proofMailTo(email, PAGES.signUp)

    // Opened twice (a mail scanner, then the person): the page and its button each time, nothing used.
    await page.goto(mailed.link)
    await page.reload()
    await poll(() => heading(page)).toBe('Create your organization')
    const confirm = page.getByRole('button', { name: 'Confirm and create the organization' })
    expect(await confirm.isVisible()).toBe(true)
    expect(await page.locator('#link-unused').textContent()).toContain('Opening this page changed nothing')
    expect((await login(t.app, email, NEW_PASSWORD)).statusCode).toBe(401)
    await shot(page, 'verify-link')

    await confirm.click()
    await expectSignedIn(page, email, organization, 'Admin')
    // The token is gone from the address bar; the organization's screens are offered to its admin.
    expect(new URL(page.url()).pathname).toBe('/')
    expect(new URL(page.url()).search).toBe('')
    await poll(() =>
      page.getByRole('navigation', { name: 'Console' }).getByRole('link').allTextContents(),
    ).toContain('Users')
    // The account screen itself is checked by test/browser.console.test.ts; here, how it was reached.
    await page.screenshot({ path: path.join(SHOTS, 'sign-up-signed-in-1280.png'), fullPage: true })

    // The link was used by the button: opened again, its button is refused.
    await page.goto(mailed.link)
    await page.getByRole('button', { name: 'Confirm and create the organization' }).click()
    await poll(() => page.locator('#outside [role=alert]').textContent()).toContain('EMAIL_PROOF_INVALID')
    await shot(page, 'verify-link-used')
    expect(errors.filter((e) => !e.includes('status of 400'))).toEqual([])
    await context.close()
  }, 120_000)

  it('confirms a sign-up with the code typed in another browser, which signs that browser in', async () => {
    const first = await browser.newContext()
    const { page: asker } = await visit(first)
    const email = uniqueEmail('coder')
    const organization = `Coders ${email.slice(6, 14)}`
    await signUpInConsole(asker, email, organization)
    const { code } = await proofMailTo(email, PAGES.signUp)

    // Another browser: no cookie or storage of the first.
    const second = await browser.newContext()
    const { page, errors } = await visit(second)
    await page.goto(base)
    await page.getByRole('link', { name: 'Create an organization' }).click()
    await page.getByRole('button', { name: 'I have a code' }).click()
    await poll(() => heading(page)).toBe('Check your email')
    await page.locator('#outside').getByLabel('Email', { exact: true }).fill(email)
    await page.getByLabel('Code from the email').fill(code)
    await shot(page, 'code')
    await page.getByRole('button', { name: 'Confirm and create the organization' }).click()
    await expectSignedIn(page, email, organization, 'Admin')
    expect(errors).toEqual([])

    // The first browser is still where it was, signed out.
    expect(await heading(asker)).toBe('Check your email')
    expect(await asker.locator('#who').textContent()).toBe('Signed out')
    await first.close()
    await second.close()
  }, 60_000)

  it('shows a wrong code refused with its reason and lets the person try again', async () => {
    const context = await browser.newContext()
    const { page } = await visit(context)
    const email = uniqueEmail('typo')
    await signUpInConsole(page, email, 'Typo and sons')
    const { code } = await proofMailTo(email, PAGES.signUp)
    const wrong = code === '000000' ? '000001' : '000000'
    await page.getByLabel('Code from the email').fill(wrong)
    await page.getByRole('button', { name: 'Confirm and create the organization' }).click()
    await poll(() => page.locator('#outside [role=alert]').textContent()).toContain('EMAIL_PROOF_INVALID')
    await page.getByLabel('Code from the email').fill(code)
    await page.getByRole('button', { name: 'Confirm and create the organization' }).click()
    await expectSignedIn(page, email, 'Typo and sons', 'Admin')
    await context.close()
  }, 60_000)
})

describe('email sign-in in the console', () => {
  it('signs in with the mailed link, after a page that uses nothing until its button', async () => {
    const user = await newUser(t.app)
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(base)
    await page.getByRole('link', { name: 'Email me a sign-in link' }).click()
    await poll(() => heading(page)).toBe('Sign in with email')
    await page.locator('#email-sign-in-form').getByLabel('Email').fill(user.email)
    await shot(page, 'email-sign-in')
    await page.getByRole('button', { name: 'Email me a link and code' }).click()
    await poll(() => heading(page)).toBe('Check your email')
    const mailed = await proofMailTo(user.email, PAGES.emailSignIn)

    await page.goto(mailed.link)
    await poll(() => heading(page)).toBe('Sign in with this link')
    expect(await who(page)).toBe('Signed out')
    await shot(page, 'email-sign-in-link')
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await poll(() => page.locator('.who-email').textContent()).toBe(user.email)
    expect(await page.locator('.who-org .badge').textContent()).toBe('Member')
    expect(new URL(page.url()).search).toBe('')
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)

  it('signs in with the mailed code typed in the console', async () => {
    const user = await newUser(t.app)
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(`${base}/#/email-sign-in`)
    await page.locator('#email-sign-in-form').getByLabel('Email').fill(user.email)
    await page.getByRole('button', { name: 'Email me a link and code' }).click()
    await poll(() => heading(page)).toBe('Check your email')
    const { code } = await proofMailTo(user.email, PAGES.emailSignIn)
    expect(await page.locator('#outside').getByLabel('Email', { exact: true }).inputValue()).toBe(user.email)
    await page.getByLabel('Code from the email').fill(code)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await poll(() => page.locator('.who-email').textContent()).toBe(user.email)
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)

  it('asks for the one-time code when the account has two-factor on, then signs in', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const { secret } = (await asUser(t.app, session, { method: 'POST', url: '/api/auth/otp/setup' })).json()
    const totp = new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 })
    const now = () => t.clock.now().getTime()
    const enabled = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/auth/otp/enable',
      payload: { code: totp.generate({ timestamp: now() }) },
    })
    expect(enabled.statusCode).toBe(200)
    // The code just used for enabling is not taken twice: the next one, a period on.
    t.clock.advance(30_000)

    const context = await browser.newContext()
    const { page } = await visit(context)
    await page.goto(`${base}/#/email-sign-in`)
    await page.locator('#email-sign-in-form').getByLabel('Email').fill(user.email)
    await page.getByRole('button', { name: 'Email me a link and code' }).click()
    const mailed = await proofMailTo(user.email, PAGES.emailSignIn)
    await page.goto(mailed.link)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await poll(() => heading(page)).toBe('Two-factor authentication')
    await shot(page, 'email-sign-in-second-factor')
    await page
      .locator('#outside')
      .getByLabel('One-time code')
      .fill(totp.generate({ timestamp: now() }))
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await poll(() => page.locator('.who-email').textContent()).toBe(user.email)
    expect(new URL(page.url()).search).toBe('')
    await context.close()
  }, 60_000)
})

describe('email change in the console', () => {
  it('changes the address from the account screen with the mailed code', async () => {
    const user = await newUser(t.app)
    const newEmail = uniqueEmail('moved')
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await signInThroughConsole(page, base, user)
    await poll(() => page.locator('#app h1').first().textContent()).toBe('My account')
    const section = page.locator('#email-section')
    await section.getByLabel('New email address').fill(newEmail)
    await section.getByLabel('Password', { exact: true }).fill(user.password)
    await section.getByRole('button', { name: 'Send a code to the new address' }).click()
    await poll(() => page.locator('#email-sent').textContent()).toContain(newEmail)
    await shot(page, 'email-change-code')
    const { code } = await proofMailTo(newEmail, PAGES.emailChange)
    await section.getByLabel('Code from the email').fill(code)
    await section.getByRole('button', { name: 'Confirm the new address' }).click()
    await poll(() => page.locator('.who-email').textContent()).toBe(newEmail)
    await poll(() => page.locator('#app dl.facts').first().textContent()).toContain(newEmail)
    expect((await login(t.app, newEmail, user.password)).statusCode).toBe(200)
    expect((await login(t.app, user.email, user.password)).statusCode).toBe(401)
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)

  it('confirms the change at the mailed link, after signing in there as the account that asked', async () => {
    const user = await newUser(t.app)
    const newEmail = uniqueEmail('relinked')
    const session = await signIn(t.app, user)
    const asked = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/account/email',
      payload: { newEmail, currentPassword: user.password },
    })
    expect(asked.statusCode).toBe(202)
    const mailed = await proofMailTo(newEmail, PAGES.emailChange)

    // Another browser, signed out: the sign-in form says why, then the page with its button.
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(mailed.link)
    await poll(() => page.locator('#signin-notice').textContent()).toContain('confirm your new email')
    await shot(page, 'verify-email-sign-in')
    await page.locator('#signin').getByLabel('Email').fill(user.email)
    await page.getByLabel('Password', { exact: true }).fill(user.password)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await poll(() => heading(page)).toBe('Confirm your new email address')
    expect(await page.locator('.who-email').textContent()).toBe(user.email)
    await shot(page, 'verify-email-link')
    await page.getByRole('button', { name: 'Confirm the new address' }).click()
    await poll(() => heading(page)).toBe('Email address changed')
    await page.getByRole('button', { name: 'Go to the console' }).click()
    await poll(() => page.locator('.who-email').textContent()).toBe(newEmail)
    expect(new URL(page.url()).search).toBe('')
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)
})

describe('password links in the console', () => {
  it('sets a new password at the mailed reset link, with a page that uses nothing until its button', async () => {
    const user = await newUser(t.app)
    expect((await requestPasswordReset(t.app, user.email)).statusCode).toBe(202)
    let link = ''
    await poll(async () => {
      await deliverMail(t)
      const text = (await mailsTo(smtp, user.email)).at(-1)?.text ?? ''
      link = /https?:\/\/\S+\/reset-password\?token=[A-Za-z0-9_-]+/.exec(text)?.[0] ?? ''
      return link
    }).toContain(`${base}/reset-password?token=`)

    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(link)
    await poll(() => heading(page)).toBe('Choose a new password')
    expect((await login(t.app, user.email, user.password)).statusCode).toBe(200)
    await page.getByLabel('New password').fill(NEW_PASSWORD)
    await page.getByLabel('Repeat the password').fill(NEW_PASSWORD)
    await shot(page, 'reset-password')
    await page.getByRole('button', { name: 'Set the new password' }).click()
    await poll(() => heading(page)).toBe('Password changed')
    await page.getByRole('button', { name: 'Go to sign-in' }).click()
    await poll(() => page.locator('#signin').isVisible()).toBe(true)
    expect(new URL(page.url()).search).toBe('')
    await signInThroughConsole(page, base, { ...user, password: NEW_PASSWORD })
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)

  it('resets a forgotten password with the mailed code, typed in the console', async () => {
    const user = await newUser(t.app)
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(base)
    await page.getByRole('link', { name: 'Forgot your password?' }).click()
    await poll(() => heading(page)).toBe('Reset your password')
    await page.locator('#password-reset-form').getByLabel('Email').fill(user.email)
    await page.getByRole('button', { name: 'Email me a link and code' }).click()
    await poll(() => heading(page)).toBe('Check your email')
    const mailed = await proofMailTo(user.email, '/reset-password')
    const form = page.locator('#password-code-form')
    expect(await form.getByLabel('Email', { exact: true }).inputValue()).toBe(user.email)
    await form.getByLabel('Code from the email').fill(mailed.code)
    await form.getByLabel('New password').fill(NEW_PASSWORD)
    await form.getByLabel('Repeat the password').fill(NEW_PASSWORD)
    await shot(page, 'reset-code')
    await page.getByRole('button', { name: 'Set the new password' }).click()
    await poll(() => heading(page)).toBe('Password set')
    expect((await login(t.app, user.email, user.password)).statusCode).toBe(401)
    await page.getByRole('link', { name: 'Go to sign-in' }).click()
    await signInThroughConsole(page, base, { ...user, password: NEW_PASSWORD })
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)

  it('accepts an invitation with its code on another device', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const invitee = uniqueEmail('invitee')
    const invited = await asUser(t.app, await signIn(t.app, admin), {
      method: 'POST',
      url: '/api/users',
      payload: { email: invitee, organizationId: admin.organizationId },
    })
    expect(invited.statusCode).toBe(202)
    const mailed = await proofMailTo(invitee, '/accept-invitation')
    const context = await browser.newContext()
    const { page, errors } = await visit(context)
    await page.goto(base)
    await page.getByRole('link', { name: 'Have an invitation code?' }).click()
    await poll(() => heading(page)).toBe('Accept an invitation')
    const form = page.locator('#password-code-form')
    await form.getByLabel('Email', { exact: true }).fill(invitee)
    await form.getByLabel('Code from the email').fill(mailed.code)
    await form.getByLabel('New password').fill(NEW_PASSWORD)
    await form.getByLabel('Repeat the password').fill(NEW_PASSWORD)
    await shot(page, 'invitation-code')
    await page.getByRole('button', { name: 'Accept and set the password' }).click()
    await poll(() => heading(page)).toBe('Password set')
    expect((await login(t.app, invitee, NEW_PASSWORD)).statusCode).toBe(200)
    expect(errors).toEqual([])
    await context.close()
  }, 60_000)
})

describe('the sign-in form', () => {
  it('offers sign-up and email sign-in only when the service has them on', async () => {
    const off = await createTestApp({
      config: ACCOUNT_TEST_CONFIG,
      deps: { console: true, mailTransport: transport },
    })
    try {
      const port = await freePort()
      await off.app.listen({ port, host: '127.0.0.1' })
      const context = await browser.newContext()
      const { page, errors } = await visit(context)
      const links = async (url: string) => {
        await page.goto(url)
        await poll(() => page.locator('#signin').isVisible()).toBe(true)
        return page.locator('.signin-more a:visible').allTextContents()
      }
      expect(await links(`http://localhost:${port}`)).toEqual([
        'Forgot your password?',
        'Have an invitation code?',
      ])
      expect(await links(base)).toEqual([
        'Email me a sign-in link',
        'Forgot your password?',
        'Have an invitation code?',
        'Create an organization',
      ])
      expect(errors).toEqual([])
      await context.close()
    } finally {
      await off.close()
    }
  }, 60_000)
})
