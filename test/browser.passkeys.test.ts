import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import { Secret, TOTP } from 'otpauth'
import type { Browser, BrowserContext, CDPSession, Page, Response } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../src/lifecycle.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, signIn, type TestUser } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { launchChromium, signInThroughConsole } from './helpers/browser.ts'
import { TestClock } from './helpers/clock.ts'

// Passkeys in real headless Chromium against a real server with the demo console: CDP's virtual
// authenticators (WebAuthn domain) stand in for the device, resident keys and user verification
// included. Adding passkeys in the console, signing in with one alone (button and autofill) or as
// the second factor of a password, and the refusals the browser and the service owe: a passkey
// registered twice, no user verification, a replayed, expired or foreign challenge, a deactivated
// account. WebAuthn refuses IP addresses as relying party ids: the pages load from
// http://localhost, which platform.web.public-url names. Screenshots go to test-results/browser/.

const SHOTS = path.resolve('test-results/browser')

let t: TestApp
let browser: Browser
let base: string

beforeAll(async () => {
  const port = await freePort()
  base = `http://localhost:${port}`
  t = await createTestApp({
    // Cookie lifetimes follow the app's clock: it must be today's for the browser to keep them.
    clock: new TestClock(new Date()),
    config: {
      ...ACCOUNT_TEST_CONFIG,
      'platform.web.public-url': base,
      'platform.auth.rate-limit.refresh-per-minute': '1000',
      'platform.auth.rate-limit.passkey-options-per-minute': '1000',
    },
    deps: { console: true },
  })
  await t.app.listen({ port, host: '127.0.0.1' })
  browser = await launchChromium()
  await mkdir(SHOTS, { recursive: true })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await t?.close()
})

/** A platform authenticator as a passkey lives on: resident keys, user verification, no touch needed. */
const AUTHENTICATOR = {
  protocol: 'ctap2' as const,
  transport: 'internal' as const,
  hasResidentKey: true,
  hasUserVerification: true,
  isUserVerified: true,
  automaticPresenceSimulation: true,
}

interface Device {
  context: BrowserContext
  page: Page
  cdp: CDPSession
  /** The page's virtual authenticator, unless the device was made without one. */
  authenticatorId: string
}

/** What the tests use of the page's client (client/src/index.ts), as seen from inside the page. */
interface PageClient {
  api: { GET(path: string): Promise<{ data: unknown; response: { status: number } }> }
  login(body: object): Promise<{ userId: string; sessionId: string }>
  logout(): Promise<void>
  loginWithPasskey(options?: object): Promise<{ userId: string; sessionId: string }>
  passkeyAssertion(username?: string): Promise<{ challengeId: string; response: { id: string } }>
  passkeys: {
    register(name?: string): Promise<{ id: string; name: string }>
    remove(id: string): Promise<void>
  }
}
type ConsoleGlobals = { platformConsole: { platform: PageClient } }

/** A sign-in ceremony as the page asked the browser for it (how many passkeys allowed), and how it ended. */
interface Ceremony {
  mediation: string
  allowCredentials: number
  outcome: string
}

/**
 * A new browser context and page with a virtual authenticator (none with `authenticator: null`).
 * `autofill: false` is a browser without passkey autofill, where the console offers the button
 * only: with autofill, a virtual authenticator holding a passkey answers the sign-in form's
 * conditional request by itself (no user to pick one), so the page would sign in on load.
 */
async function newDevice(
  options: { autofill?: boolean; authenticator?: Partial<typeof AUTHENTICATOR> | null } = {},
): Promise<Device> {
  const context = await browser.newContext()
  if (options.autofill === false) {
    await context.addInitScript(() => {
      const credential = (globalThis as unknown as { PublicKeyCredential: object }).PublicKeyCredential
      Object.defineProperty(credential, 'isConditionalMediationAvailable', { value: async () => false })
    })
  }
  // Every navigator.credentials.get of the page: its mediation, its allowed passkeys, how it ended.
  await context.addInitScript(() => {
    type Request = { mediation?: string; publicKey?: { allowCredentials?: unknown[] } }
    type Get = (request?: Request) => Promise<unknown>
    const container = (globalThis as unknown as { navigator: { credentials: { get: Get } } }).navigator
      .credentials
    const get = container.get.bind(container)
    const log: Ceremony[] = []
    Object.assign(globalThis, { ceremonies: log })
    container.get = (request) => {
      const entry = {
        mediation: request?.mediation ?? 'optional',
        allowCredentials: request?.publicKey?.allowCredentials?.length ?? 0,
        outcome: 'pending',
      }
      log.push(entry)
      return get(request).then(
        (credential) => {
          entry.outcome = 'resolved'
          return credential
        },
        (error: Error) => {
          entry.outcome = error.name
          throw error
        },
      )
    }
  })
  const page = await context.newPage()
  const cdp = await context.newCDPSession(page)
  await cdp.send('WebAuthn.enable')
  let authenticatorId = ''
  if (options.authenticator !== null) {
    ;({ authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: { ...AUTHENTICATOR, ...options.authenticator },
    }))
  }
  return { context, page, cdp, authenticatorId }
}

const ceremoniesOf = (page: Page) =>
  page.evaluate(() => (globalThis as unknown as { ceremonies: Ceremony[] }).ceremonies)

/**
 * The bodies of the POSTs the context sends to `pathname` (null for a call the client may retry: it
 * sends a clone of its Request, whose body the browser does not report).
 */
function recordPosts(context: BrowserContext, pathname: string): unknown[] {
  const bodies: unknown[] = []
  context.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === pathname)
      bodies.push(request.postDataJSON())
  })
  return bodies
}

/** A sign-in's answer: status, body, and each Set-Cookie's name and attributes (no value, no date). */
async function signInAnswer(response: Response) {
  const cookies = (await response.headerValues('set-cookie'))
    .map((line) => {
      const [pair = '', ...attributes] = line.split(';').map((part) => part.trim())
      const kept = attributes.filter((a) => !/^expires=/i.test(a)).map((a) => a.toLowerCase())
      return [pair.slice(0, pair.indexOf('=')), ...kept.sort()].join('; ')
    })
    .sort()
  return {
    status: response.status(),
    body: (await response.json()) as { userId: string; organizationId: string; sessionId: string },
    cookies,
    cacheControl: response.headers()['cache-control'],
  }
}

const answerTo = (page: Page, pathname: string) =>
  page.waitForResponse((r) => new URL(r.url()).pathname === pathname && r.request().method() === 'POST')

/** The session cookies the browser holds: everything but their values and expiry. */
async function cookieFlags(context: BrowserContext) {
  return (await context.cookies())
    .map(({ name, domain, path, httpOnly, secure, sameSite }) => ({
      name,
      domain,
      path,
      httpOnly,
      secure,
      sameSite,
    }))
    .sort((a, b) => a.name.localeCompare(b.name))
}

/** The sign-in method of the page's own session, from GET /api/auth/sessions. */
const currentSignInMethod = (page: Page) =>
  page.evaluate(async () => {
    const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
    const { data } = await platform.api.GET('/api/auth/sessions')
    return (data as { current: boolean; signInMethod: string | null }[]).find((s) => s.current)?.signInMethod
  })

/** POSTs JSON from the page (same origin, its cookies); the status and the body. */
const postInPage = (page: Page, url: string, body: unknown = {}) =>
  page.evaluate(
    async ({ url, body }) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      return { status: response.status, body: (await response.json().catch(() => null)) as { code?: string } }
    },
    { url, body },
  )

const activeSessions = async (userId: string) =>
  (
    await t.app.db
      .selectFrom('sessions')
      .select('id')
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .execute()
  ).length

const storedPasskeys = (userId: string) =>
  t.app.db.selectFrom('passkeys').select(['id', 'name']).where('account_id', '=', userId).execute()

/** Opens the console and signs in with the password through the page's client. */
async function signInWithClient(page: Page, user: TestUser) {
  await page.goto(base)
  await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
  await page.evaluate(
    async ({ username, password }) => {
      const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
      await platform.login({ username, password })
    },
    { username: user.email, password: user.password },
  )
}

/** A new user whose passkey is on the device's authenticator; signed out again afterwards. */
async function userWithPasskey(device: Device): Promise<TestUser> {
  const user = await newUser(t.app)
  await signInWithClient(device.page, user)
  await device.page.evaluate(async () => {
    const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
    await platform.passkeys.register('Test device')
    await platform.logout()
  })
  return user
}

/** A passkey assertion from the page's client: a fresh challenge and the authenticator's answer. */
const assertion = (page: Page, username?: string) =>
  page.evaluate(async (username) => {
    const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
    return platform.passkeyAssertion(username)
  }, username)

/**
 * navigator.credentials.get in the page with exactly these options (no @simplewebauthn/browser in
 * between, so the test decides what the client would not: the challenge, user verification), encoded
 * as the service expects; with the authenticator data's flags (0x04: the user was verified).
 */
const rawAssertion = (page: Page, request: { challenge: string; userVerification: string }) =>
  page.evaluate(async ({ challenge, userVerification }) => {
    const bytes = (text: string) =>
      Uint8Array.from(atob(text.replaceAll('-', '+').replaceAll('_', '/')), (c) => c.charCodeAt(0))
    const text = (buffer: ArrayBuffer) =>
      btoa(String.fromCharCode(...new Uint8Array(buffer)))
        .replaceAll('+', '-')
        .replaceAll('/', '_')
        .replace(/=+$/, '')
    interface Assertion {
      id: string
      rawId: ArrayBuffer
      response: {
        clientDataJSON: ArrayBuffer
        authenticatorData: ArrayBuffer
        signature: ArrayBuffer
        userHandle: ArrayBuffer | null
      }
    }
    const { credentials } = (
      globalThis as unknown as { navigator: { credentials: { get(o: object): Promise<Assertion> } } }
    ).navigator
    const credential = await credentials.get({
      publicKey: { challenge: bytes(challenge), rpId: 'localhost', userVerification },
    })
    const { response } = credential
    return {
      flags: new Uint8Array(response.authenticatorData)[32] ?? 0,
      response: {
        id: credential.id,
        rawId: text(credential.rawId),
        type: 'public-key',
        response: {
          clientDataJSON: text(response.clientDataJSON),
          authenticatorData: text(response.authenticatorData),
          signature: text(response.signature),
          ...(response.userHandle ? { userHandle: text(response.userHandle) } : {}),
        },
        clientExtensionResults: {},
      },
    }
  }, request)

/** navigator.credentials.create in the page for these creation options, encoded as the service expects. */
const rawAttestation = (page: Page, options: Record<string, unknown>) =>
  page.evaluate(async (options) => {
    const bytes = (text: string) =>
      Uint8Array.from(atob(text.replaceAll('-', '+').replaceAll('_', '/')), (c) => c.charCodeAt(0))
    const text = (buffer: ArrayBuffer) =>
      btoa(String.fromCharCode(...new Uint8Array(buffer)))
        .replaceAll('+', '-')
        .replaceAll('/', '_')
        .replace(/=+$/, '')
    interface Attestation {
      id: string
      rawId: ArrayBuffer
      response: { clientDataJSON: ArrayBuffer; attestationObject: ArrayBuffer }
    }
    const { credentials } = (
      globalThis as unknown as { navigator: { credentials: { create(o: object): Promise<Attestation> } } }
    ).navigator
    const user = options.user as { id: string; name: string; displayName: string }
    const credential = await credentials.create({
      publicKey: {
        rp: options.rp,
        user: { ...user, id: bytes(user.id) },
        challenge: bytes(options.challenge as string),
        pubKeyCredParams: options.pubKeyCredParams,
        authenticatorSelection: options.authenticatorSelection,
        attestation: 'none',
      },
    })
    return {
      id: credential.id,
      rawId: text(credential.rawId),
      type: 'public-key',
      response: {
        clientDataJSON: text(credential.response.clientDataJSON),
        attestationObject: text(credential.response.attestationObject),
      },
      clientExtensionResults: {},
    }
  }, options)

const OPTIONS = '/api/auth/passkeys/authentication/options'
const AUTHENTICATION = '/api/auth/passkeys/authentication'

describe('passkeys in Chromium', () => {
  it('adds a passkey in the console and signs in with it alone, usernameless then username-first, answering as a password login', async () => {
    const device = await newDevice({ autofill: false })
    const { context, page } = device
    const user = await newUser(t.app)

    const passwordLogin = answerTo(page, '/api/auth/login')
    await signInThroughConsole(page, base, user)
    const byPassword = await signInAnswer(await passwordLogin)
    const passwordCookies = await cookieFlags(context)
    expect(await currentSignInMethod(page)).toBe('password')

    await expect.poll(() => page.locator('#passkeys-status').textContent()).toContain('No passkeys yet')
    await page.getByLabel('Name of the new passkey').fill('Work laptop')
    await page.getByRole('button', { name: 'Add a passkey' }).click()
    await expect
      .poll(() => page.locator('#passkeys tr').allTextContents())
      .toEqual([expect.stringContaining('Work laptop')])
    expect(await page.locator('#passkeys-error').textContent()).toBe('')
    expect((await storedPasskeys(user.id)).map((p) => p.name)).toEqual(['Work laptop'])

    // Usernameless: an empty email field, any passkey of the site may answer.
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    const usernameless = answerTo(page, AUTHENTICATION)
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click()
    const byPasskey = await signInAnswer(await usernameless)
    await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
    const anyPasskey = { mediation: 'optional', allowCredentials: 0, outcome: 'resolved' }
    expect(await ceremoniesOf(page)).toEqual([anyPasskey])

    expect(byPasskey.status).toBe(200)
    expect(Object.keys(byPasskey.body).sort()).toEqual(Object.keys(byPassword.body).sort())
    expect(byPasskey.body).toMatchObject({ userId: user.id, organizationId: user.organizationId })
    expect(byPasskey.body.sessionId).not.toBe(byPassword.body.sessionId)
    expect(byPasskey.cookies).toEqual(byPassword.cookies)
    expect(byPasskey.cookies).toEqual([
      expect.stringMatching(/^access_token; httponly; /),
      expect.stringMatching(/^refresh_token; httponly; .*path=\/api\/auth/),
    ])
    expect(byPasskey.cacheControl).toBe(byPassword.cacheControl)
    expect(await cookieFlags(context)).toEqual(passwordCookies)
    expect(await currentSignInMethod(page)).toBe('passkey')
    await expect.poll(() => page.locator('#sessions').textContent()).toContain('Passkey')
    // Its use is on the list.
    await expect.poll(() => page.locator('#passkeys tr').first().textContent()).not.toContain('never')

    // Username-first: the email names the account, whose passkeys alone may answer.
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    await page.getByLabel('Email').first().fill(user.email)
    const usernameFirst = answerTo(page, AUTHENTICATION)
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click()
    const second = await signInAnswer(await usernameFirst)
    expect(await ceremoniesOf(page)).toEqual([
      anyPasskey,
      { mediation: 'optional', allowCredentials: 1, outcome: 'resolved' },
    ])
    expect(second.body).toMatchObject({ userId: user.id, organizationId: user.organizationId })
    expect(second.cookies).toEqual(byPassword.cookies)
    await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
    expect(await currentSignInMethod(page)).toBe('passkey')
    expect(await page.locator('#error').textContent()).toBe('')
    await context.close()
  })

  it('signs a returning visitor in through the email field’s autofill, and ends that offer when the user signs in with a password', async () => {
    // The passkey is made on one page and carried to a fresh one: the same authenticator, later.
    const registrar = await newDevice({ autofill: false })
    const user = await userWithPasskey(registrar)
    const { credentials } = await registrar.cdp.send('WebAuthn.getCredentials', {
      authenticatorId: registrar.authenticatorId,
    })
    await registrar.context.close()

    const returning = await newDevice()
    for (const credential of credentials)
      await returning.cdp.send('WebAuthn.addCredential', {
        authenticatorId: returning.authenticatorId,
        credential,
      })
    await returning.page.goto(base)
    expect(await returning.page.locator('input[name="username"]').getAttribute('autocomplete')).toBe(
      'username webauthn',
    )
    // Nothing clicked: the conditional request the page made on load is what signed in.
    await expect
      .poll(() => returning.page.locator('#who').textContent())
      .toContain(`Signed in as ${user.email}`)
    expect(await ceremoniesOf(returning.page)).toEqual([
      { mediation: 'conditional', allowCredentials: 0, outcome: 'resolved' },
    ])
    expect(await currentSignInMethod(returning.page)).toBe('passkey')
    expect(await returning.page.locator('#error').textContent()).toBe('')
    await returning.context.close()

    // The offer waits (no touch of the authenticator), and the password sign-in ends it quietly.
    const other = await newDevice({ authenticator: { automaticPresenceSimulation: false } })
    const signIns = recordPosts(other.context, AUTHENTICATION)
    await other.page.goto(base)
    await expect
      .poll(() => ceremoniesOf(other.page))
      .toEqual([{ mediation: 'conditional', allowCredentials: 0, outcome: 'pending' }])
    await signInThroughConsole(other.page, base, await newUser(t.app))
    await expect
      .poll(() => ceremoniesOf(other.page))
      .toEqual([{ mediation: 'conditional', allowCredentials: 0, outcome: 'AbortError' }])
    expect(await other.page.locator('#error').textContent()).toBe('')
    expect(await currentSignInMethod(other.page)).toBe('password')
    expect(signIns).toEqual([])
    await other.context.close()
  })

  it('adds a second passkey from a second authenticator; the same authenticator twice is refused by the browser and nothing is created', async () => {
    const device = await newDevice({ autofill: false })
    const { context, page, cdp } = device
    const registrations = recordPosts(context, '/api/auth/passkeys/registration')
    const user = await newUser(t.app)
    await signInThroughConsole(page, base, user)
    await page.getByLabel('Name of the new passkey').fill('First')
    await page.getByRole('button', { name: 'Add a passkey' }).click()
    await expect.poll(() => page.locator('#passkeys tr').count()).toBe(1)
    expect(registrations).toHaveLength(1)

    // The options exclude the passkey this authenticator holds: the browser says InvalidStateError.
    await page.getByLabel('Name of the new passkey').fill('First again')
    await page.getByRole('button', { name: 'Add a passkey' }).click()
    await expect
      .poll(() => page.locator('#passkeys-error').textContent())
      .toBe('The authenticator was previously registered (ERROR_AUTHENTICATOR_PREVIOUSLY_REGISTERED)')
    const fromClient = await page.evaluate(async () => {
      const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
      return platform.passkeys.register('First once more').then(
        () => 'created',
        (error: Error & { code?: string }) => `${error.name} ${error.code}`,
      )
    })
    expect(fromClient).toBe('InvalidStateError ERROR_AUTHENTICATOR_PREVIOUSLY_REGISTERED')
    expect(registrations).toHaveLength(1)
    expect((await storedPasskeys(user.id)).map((p) => p.name)).toEqual(['First'])
    await expect.poll(() => page.locator('#passkeys tr').count()).toBe(1)

    // Another authenticator (the first one gone from this page, so the second answers).
    await cdp.send('WebAuthn.removeVirtualAuthenticator', { authenticatorId: device.authenticatorId })
    await cdp.send('WebAuthn.addVirtualAuthenticator', { options: AUTHENTICATOR })
    await page.getByLabel('Name of the new passkey').fill('Second')
    await page.getByRole('button', { name: 'Add a passkey' }).click()
    await expect.poll(() => page.locator('#passkeys tr').count()).toBe(2)
    expect(await page.locator('#passkeys-status').textContent()).toBe('2 passkeys')
    expect(await page.locator('#passkeys-error').textContent()).toBe('')
    expect((await storedPasskeys(user.id)).map((p) => p.name).sort()).toEqual(['First', 'Second'])
    await context.close()
  })

  it('refuses an assertion without user verification with 401 PASSKEY_INVALID and starts no session', async () => {
    const device = await newDevice({ autofill: false })
    const { page, cdp, authenticatorId } = device
    const user = await userWithPasskey(device)
    const signIns = recordPosts(device.context, AUTHENTICATION)
    const optionsOf = async () =>
      (await postInPage(page, OPTIONS)).body as unknown as {
        challengeId: string
        options: { challenge: string }
      }

    // The same hand-made ceremony with the user verified is accepted: the refusal below is the flag's.
    const verified = await optionsOf()
    const good = await rawAssertion(page, {
      challenge: verified.options.challenge,
      userVerification: 'required',
    })
    expect(good.flags & 0x04).toBe(0x04)
    expect(
      await postInPage(page, AUTHENTICATION, { challengeId: verified.challengeId, response: good.response }),
    ).toMatchObject({ status: 200, body: { userId: user.id } })
    await page.evaluate(async () => {
      const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
      await platform.logout()
    })
    signIns.length = 0
    const before = await activeSessions(user.id)

    await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: false })
    // Through the client, the browser itself refuses: the options require user verification.
    const refused = await page.evaluate(async () => {
      const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
      return platform.loginWithPasskey().then(
        () => 'signed in',
        (error: Error) => error.name,
      )
    })
    expect(refused).toBe('NotAllowedError')
    expect(signIns).toEqual([])

    // The options tampered with in the page (user verification discouraged): the service refuses.
    const { challengeId, options } = await optionsOf()
    const unverified = await rawAssertion(page, {
      challenge: options.challenge,
      userVerification: 'discouraged',
    })
    expect(unverified.flags & 0x04).toBe(0)
    expect(
      await postInPage(page, AUTHENTICATION, { challengeId, response: unverified.response }),
    ).toMatchObject({
      status: 401,
      body: { code: 'PASSKEY_INVALID' },
    })
    expect(await activeSessions(user.id)).toBe(before)
    expect((await device.context.cookies()).map((c) => c.name)).toEqual([])
    await device.context.close()
  })

  it('refuses a replayed assertion, an expired challenge, a foreign challenge and a deactivated account, each with its code', async () => {
    const a = await newDevice({ autofill: false })
    const b = await newDevice({ autofill: false })
    const alice = await userWithPasskey(a)
    const bob = await userWithPasskey(b)

    // Replayed: the challenge is used by the first answer.
    const once = await assertion(a.page)
    expect(await postInPage(a.page, AUTHENTICATION, once)).toMatchObject({
      status: 200,
      body: { userId: alice.id },
    })
    expect(await postInPage(a.page, AUTHENTICATION, once)).toMatchObject({
      status: 401,
      body: { code: 'PASSKEY_CHALLENGE_INVALID' },
    })

    // Expired: answered a second after the challenge's time is up (and a second before, accepted).
    const ttl = t.config.auth.passkeys.challengeTtl
    const inTime = await assertion(a.page, alice.email)
    t.clock.advanceSeconds(ttl - 1)
    expect(await postInPage(a.page, AUTHENTICATION, inTime)).toMatchObject({ status: 200 })
    const late = await assertion(a.page, alice.email)
    t.clock.advanceSeconds(ttl + 1)
    expect(await postInPage(a.page, AUTHENTICATION, late)).toMatchObject({
      status: 401,
      body: { code: 'PASSKEY_CHALLENGE_INVALID' },
    })

    // A challenge given for Alice's username, answered by Bob's passkey.
    const forAlice = (await postInPage(a.page, OPTIONS, { username: alice.email })).body as unknown as {
      challengeId: string
      options: { challenge: string }
    }
    const bobsAnswer = await rawAssertion(b.page, {
      challenge: forAlice.options.challenge,
      userVerification: 'required',
    })
    const bobsBefore = await activeSessions(bob.id)
    expect(
      await postInPage(b.page, AUTHENTICATION, {
        challengeId: forAlice.challengeId,
        response: bobsAnswer.response,
      }),
    ).toMatchObject({ status: 401, body: { code: 'PASSKEY_INVALID' } })
    expect(await activeSessions(bob.id)).toBe(bobsBefore)

    // An assertion signed over a registration challenge: refused under that challenge's id (not
    // a sign-in's) and under a sign-in's id (not its challenge).
    await signInWithClient(a.page, alice)
    const creation = (await postInPage(a.page, '/api/auth/passkeys/registration/options'))
      .body as unknown as {
      challenge: string
    }
    const registrationChallenge = await t.app.db
      .selectFrom('passkey_challenges')
      .select(['id', 'ceremony'])
      .where('challenge', '=', creation.challenge)
      .executeTakeFirstOrThrow()
    expect(registrationChallenge.ceremony).toBe('registration')
    const overRegistration = await rawAssertion(a.page, {
      challenge: creation.challenge,
      userVerification: 'required',
    })
    expect(
      await postInPage(a.page, AUTHENTICATION, {
        challengeId: registrationChallenge.id,
        response: overRegistration.response,
      }),
    ).toMatchObject({ status: 401, body: { code: 'PASSKEY_CHALLENGE_INVALID' } })
    const fresh = (await postInPage(a.page, OPTIONS)).body as unknown as { challengeId: string }
    expect(
      await postInPage(a.page, AUTHENTICATION, {
        challengeId: fresh.challengeId,
        response: overRegistration.response,
      }),
    ).toMatchObject({ status: 401, body: { code: 'PASSKEY_INVALID' } })

    // A new credential made over a sign-in's challenge is no registration. (On the authenticator it
    // takes the place of Alice's passkey, same user handle: her device is not used after this.)
    const signInOptions = (await postInPage(a.page, OPTIONS)).body as unknown as {
      options: { challenge: string }
    }
    const realCreation = (await postInPage(a.page, '/api/auth/passkeys/registration/options')).body as Record<
      string,
      unknown
    >
    const passkeysBefore = await storedPasskeys(alice.id)
    const attestation = await rawAttestation(a.page, {
      ...realCreation,
      challenge: signInOptions.options.challenge,
    })
    expect(
      await postInPage(a.page, '/api/auth/passkeys/registration', { response: attestation }),
    ).toMatchObject({
      status: 400,
      body: { code: 'PASSKEY_REGISTRATION_FAILED' },
    })
    expect(await storedPasskeys(alice.id)).toEqual(passkeysBefore)

    // A deactivated account: the passkey verifies, the account may not sign in.
    await t.app.services.users.deactivateByOperator(bob.id)
    const bobsLast = await assertion(b.page)
    expect(await postInPage(b.page, AUTHENTICATION, bobsLast)).toMatchObject({
      status: 401,
      body: { code: 'INVALID_CREDENTIALS' },
    })
    expect(await activeSessions(bob.id)).toBe(0)
    await a.context.close()
    await b.context.close()
  })

  it('signs an admin whose role requires OTP in with password and passkey, or a passkey alone, never the password alone', async () => {
    const device = await newDevice({ autofill: false })
    const { context, page } = device
    const admin = await newUser(t.app, { role: 'admin' })
    await signInThroughConsole(page, base, admin)
    await page.getByRole('button', { name: 'Add a passkey' }).click()
    await expect.poll(() => page.locator('#passkeys tr').count()).toBe(1)
    // OTP on (as the role asks), from another session.
    const other = await signIn(t.app, admin)
    const setup = await asUser(t.app, other, { method: 'POST', url: '/api/auth/otp/setup' })
    const totp = new TOTP({
      secret: Secret.fromBase32(setup.json().secret),
      algorithm: 'SHA1',
      digits: 6,
      period: 30,
    })
    const enabled = await asUser(t.app, other, {
      method: 'POST',
      url: '/api/auth/otp/enable',
      payload: { code: totp.generate({ timestamp: t.clock.now().getTime() }) },
    })
    expect(enabled.statusCode).toBe(200)
    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')

    const logins = recordPosts(context, '/api/auth/login')
    await page.getByLabel('Email').first().fill(admin.email)
    await page.getByLabel('Password').fill(admin.password)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await expect.poll(() => page.locator('#error').textContent()).toContain('OTP_REQUIRED')
    await page.getByRole('button', { name: 'Sign in with password and passkey' }).click()
    await expect.poll(() => page.locator('#who').textContent()).toContain('Signed in')
    expect(logins).toEqual([
      { username: admin.email, password: admin.password },
      {
        username: admin.email,
        password: admin.password,
        passkey: expect.objectContaining({ challengeId: expect.any(String) }),
      },
    ])
    expect(await currentSignInMethod(page)).toBe('password+passkey')
    await expect.poll(() => page.locator('#sessions').textContent()).toContain('Password and passkey')

    await page.getByRole('button', { name: 'Sign out', exact: true }).click()
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click()
    await expect.poll(() => page.locator('#who').textContent()).toContain(`Signed in as ${admin.email}`)
    expect(await currentSignInMethod(page)).toBe('passkey')
    expect(logins).toHaveLength(2)
    await context.close()
  })

  it('runs the console’s passkey screens by keyboard: loading, empty, add, rename, a failed removal and its detail, at 1280 and 360 px', async () => {
    const device = await newDevice({ autofill: false })
    const { context, page } = device
    const user = await newUser(t.app)
    await page.setViewportSize({ width: 1280, height: 800 })
    await page.goto(base)
    await expect.poll(() => page.locator('#who').textContent()).toBe('Signed out')
    await page.screenshot({ path: path.join(SHOTS, 'passkeys-sign-in-1280.png'), fullPage: true })
    await page.setViewportSize({ width: 360, height: 740 })
    await page.screenshot({ path: path.join(SHOTS, 'passkeys-sign-in-360.png'), fullPage: true })
    const fitsWidth = (selector: string) =>
      page.locator(selector).evaluate((element) => element.scrollWidth <= element.clientWidth)
    expect(await fitsWidth('#signin')).toBe(true)

    // Every sign-in control in order with Tab; the password submitted with Enter.
    await page.getByLabel('Email').first().fill(user.email)
    await page.getByLabel('Password').fill(user.password)
    await page.getByLabel('Email').first().focus()
    const focusOrder: string[] = []
    for (let i = 0; i < 5; i++) {
      await page.keyboard.press('Tab')
      focusOrder.push(
        await page.evaluate(() => {
          type Active = { tagName: string; textContent: string; getAttribute(name: string): string | null }
          const active = (globalThis as unknown as { document: { activeElement: Active } }).document
            .activeElement
          return (active.tagName === 'INPUT' ? active.getAttribute('name') : active.textContent) ?? ''
        }),
      )
    }
    expect(focusOrder).toEqual([
      'password',
      'otpCode',
      'Sign in',
      'Sign in with password and passkey',
      'Sign in with a passkey',
    ])
    // The list's answer is held until its loading state has been seen.
    let release!: () => void
    const held = new Promise<void>((resolve) => {
      release = resolve
    })
    await page.route('**/api/auth/passkeys', async (route) => {
      await held
      await route.continue()
    })
    await page.getByLabel('Password').press('Enter')
    await expect.poll(() => page.locator('#passkeys-status').textContent()).toBe('Loading passkeys…')
    expect(await page.locator('#passkeys-section').getAttribute('aria-busy')).toBe('true')
    release()
    await expect
      .poll(() => page.locator('#passkeys-status').textContent())
      .toBe('No passkeys yet: add one to sign in without a password.')
    expect(await page.locator('#passkeys-section').getAttribute('aria-busy')).toBeNull()
    await page.unroute('**/api/auth/passkeys')

    await page.getByLabel('Name of the new passkey').focus()
    await page.keyboard.type('Work laptop')
    await page.keyboard.press('Enter')
    await expect
      .poll(() => page.locator('#passkeys tr').allTextContents())
      .toEqual([expect.stringContaining('Work laptop')])

    // Rename: Enter on the row's button opens the name field, Escape leaves it as it was.
    await page.getByRole('button', { name: 'Rename Work laptop' }).focus()
    await page.keyboard.press('Enter')
    const field = page.getByLabel('New name for Work laptop')
    await expect.poll(() => field.evaluate((input) => input === input.ownerDocument.activeElement)).toBe(true)
    await page.keyboard.type('Old laptop')
    await page.keyboard.press('Escape')
    await expect.poll(() => field.count()).toBe(0)
    expect(await page.locator('#passkeys tr td').first().textContent()).toBe('Work laptop')
    // The keyboard is back on the row's button: Enter opens the editor again.
    const focused = (name: string) =>
      page.getByRole('button', { name }).evaluate((b) => b === b.ownerDocument.activeElement)
    expect(await focused('Rename Work laptop')).toBe(true)
    await page.keyboard.press('Enter')
    await page.keyboard.type('Home laptop')
    await page.keyboard.press('Enter')
    await expect.poll(() => page.locator('#passkeys tr td').first().textContent()).toBe('Home laptop')
    await expect.poll(() => focused('Rename Home laptop')).toBe(true)
    expect((await storedPasskeys(user.id)).map((p) => p.name)).toEqual(['Home laptop'])
    expect(await page.locator('#passkeys-error').textContent()).toBe('')

    await page.setViewportSize({ width: 1280, height: 800 })
    await page.screenshot({ path: path.join(SHOTS, 'passkeys-1280.png'), fullPage: true })
    await page.setViewportSize({ width: 360, height: 740 })
    await page.screenshot({ path: path.join(SHOTS, 'passkeys-360.png'), fullPage: true })
    expect(await fitsWidth('#passkeys-section')).toBe(true)

    // Removed meanwhile (another tab): the removal's 404 shows the problem's detail; the list is fresh.
    const [stored] = await storedPasskeys(user.id)
    await page.evaluate(async (id) => {
      const { platform } = (globalThis as unknown as ConsoleGlobals).platformConsole
      await platform.passkeys.remove(id)
    }, stored?.id ?? '')
    await page.getByRole('button', { name: 'Remove Home laptop' }).click()
    await page.getByRole('dialog').getByRole('button', { name: 'Remove' }).click()
    await expect.poll(() => page.locator('#passkeys-error').textContent()).toBe('No such passkey (NOT_FOUND)')
    await expect
      .poll(() => page.locator('#passkeys-status').textContent())
      .toBe('No passkeys yet: add one to sign in without a password.')
    expect(await page.locator('#passkeys tr').count()).toBe(0)
    await context.close()
  })
})
