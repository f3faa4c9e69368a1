import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core'
import { expect } from 'vitest'
import type { TestUser } from './accounts.ts'

// Real headless Chromium for the browser tests, driven by playwright-core: Debian's
// /usr/bin/chromium (.ci/run installs it) or CHROMIUM_PATH, never a browser download. And what the
// tests do on the demo console's page (console/, served at `/` with `deps: { console: true }`).

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

export function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(`no Chromium at ${CHROMIUM}: apt-get install chromium, or set CHROMIUM_PATH`)
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
}

/** What the tests use of the page's client (client/src/index.ts), as seen from inside the page. */
export interface PagePlatform {
  api: {
    GET(path: string, init?: object): Promise<{ response: { status: number }; data: { downloadUrl: string } }>
    POST(path: string, init?: object): Promise<{ response: { status: number }; error?: unknown }>
  }
  state: { status: string; reason?: string; session?: { sessionId: string } }
  refresh(): Promise<boolean>
  upload(options: object): Promise<{ id: string; status: string; sizeBytes: number; fileName: string }>
}

/** The key the page's client keeps in localStorage while the browser holds a session. */
export const SESSION_HINT = 'platform:refreshed-at'

/** Every POST /api/auth/refresh the browser context sends, with its answer's code. */
export function recordRefreshes(context: BrowserContext) {
  const answers: { status: number; code?: string }[] = []
  context.on('response', async (response) => {
    if (!response.url().endsWith('/api/auth/refresh')) return
    const body = await response.json().catch(() => ({}))
    answers.push({ status: response.status(), code: body.code })
  })
  return answers
}

/** Every POST /api/auth/refresh the browser context sends, recorded when it leaves (answered or not). */
export function recordRefreshRequests(context: BrowserContext) {
  const sent: string[] = []
  context.on('request', (request) => {
    if (request.url().endsWith('/api/auth/refresh')) sent.push(`${request.method()} ${request.url()}`)
  })
  return sent
}

export async function signInThroughConsole(page: Page, base: string, user: TestUser) {
  await page.goto(base)
  await page.getByLabel('Email').first().fill(user.email)
  await page.getByLabel('Password').fill(user.password)
  await page.getByRole('button', { name: 'Sign in', exact: true }).click()
  await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
}

/** Calls GET /api/auth/sessions through the page's typed client; returns the status. */
export const callThroughClient = (page: Page) =>
  page.evaluate(async () => {
    const { platform } = (globalThis as unknown as { platformConsole: { platform: PagePlatform } })
      .platformConsole
    const result = await platform.api.GET('/api/auth/sessions')
    return result.response.status as number
  })

export const stateOf = (page: Page) =>
  page.evaluate(
    () =>
      (globalThis as unknown as { platformConsole: { platform: PagePlatform } }).platformConsole.platform
        .state.status,
  )

export const sessionHintOf = (page: Page) => page.evaluate((key) => localStorage.getItem(key), SESSION_HINT)

export interface Violation {
  id: string
  impact: string | null
  help: string
  nodes: string[]
}

let axeSource: Promise<string> | undefined

/** axe-core's serious and critical violations on the page as it is now. */
export async function seriousViolations(page: Page): Promise<Violation[]> {
  axeSource ??= readFile(path.resolve('node_modules/axe-core/axe.min.js'), 'utf8')
  // Evaluated, not added as a <script>: the console's policy refuses inline scripts.
  if (!(await page.evaluate(() => 'axe' in globalThis))) await page.evaluate(await axeSource)
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
