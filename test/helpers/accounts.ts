import { randomBytes, randomUUID } from 'node:crypto'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import type { ParsedMail } from 'mailparser'
import { afterAll, beforeAll, expect } from 'vitest'
import type { Role } from '../../src/db/schema.ts'
import { createOrganization } from '../../src/features/organizations/service.ts'
import { SmtpTransport } from '../../src/mail/transports.ts'
import { createTestApp, type TestApp, type TestAppOptions } from './app.ts'
import { TestSmtpServer } from './smtp.ts'

// Account-management flows over HTTP with mail through a real SMTP server: users, sign-in, the
// session cookies, and the links the emails carry.

export const PASSWORD = 'correct horse battery staple'
export const FRONTEND_URL = 'https://app.example.test'
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/**
 * Cheap password hashing and generous allowances for logins, service tokens, resets and invitations,
 * for files that make many of them a minute.
 */
export const FAST_LOGIN_CONFIG = {
  'platform.auth.password.hash-memory-kib': '1024',
  'platform.auth.password.hash-iterations': '1',
  'platform.auth.rate-limit.login-per-minute': '1000',
  'platform.auth.rate-limit.service-token-per-minute': '1000',
  'platform.auth.rate-limit.reset-per-minute': '1000',
  'platform.auth.rate-limit.invite-per-minute': '1000',
}

/** Cheap password hashing, generous login limits, and links under a frontend distinct from the public URL. */
export const ACCOUNT_TEST_CONFIG = {
  ...FAST_LOGIN_CONFIG,
  'platform.web.frontend-url': FRONTEND_URL,
}

export interface MailTestApp extends TestApp {
  smtp: TestSmtpServer
  /** The transport the app sends through: SMTP to `smtp`. */
  transport: SmtpTransport
}

/** A test app for the whole file whose mail goes over SMTP to a real server; built before, closed after. */
export function useMailTestApp(options: TestAppOptions = {}): MailTestApp {
  const holder = {} as MailTestApp
  beforeAll(async () => {
    const smtp = await TestSmtpServer.start()
    const transport = new SmtpTransport(smtp.url)
    const t = await createTestApp({
      ...options,
      config: { ...ACCOUNT_TEST_CONFIG, ...options.config },
      deps: { mailTransport: transport, ...options.deps },
    })
    Object.assign(holder, t, { smtp, transport })
  })
  afterAll(async () => {
    await holder.close?.()
    await holder.transport?.close()
    await holder.smtp?.close()
  })
  return holder
}

export const uniqueEmail = (prefix: string) => `${prefix}-${randomBytes(4).toString('hex')}@example.com`

export interface TestUser {
  id: string
  email: string
  organizationId: string
  password: string
}

export async function newOrganization(app: FastifyInstance): Promise<string> {
  return (await createOrganization(app.db, { name: `Org ${randomBytes(4).toString('hex')}` })).id
}

/** An active account with a password, in a new organization unless one is given. */
export async function newUser(
  app: FastifyInstance,
  options: { organizationId?: string; role?: Role; email?: string } = {},
): Promise<TestUser> {
  const organizationId = options.organizationId ?? (await newOrganization(app))
  const email = options.email ?? uniqueEmail(options.role ?? 'member')
  const account = await app.services.users.create({
    organizationId,
    email,
    role: options.role ?? 'member',
    password: PASSWORD,
  })
  return { id: account.id, email, organizationId, password: PASSWORD }
}

export function login(
  app: FastifyInstance,
  username: string,
  password: string,
  options: { otpCode?: string; userAgent?: string } = {},
): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: { username, password, ...(options.otpCode === undefined ? {} : { otpCode: options.otpCode }) },
    ...(options.userAgent ? { headers: { 'user-agent': options.userAgent } } : {}),
  })
}

/** POST /api/auth/password-reset/request for the address (202 whether or not it has an account). */
export function requestPasswordReset(app: FastifyInstance, email: string): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/password-reset/request', payload: { email } })
}

export interface Session {
  userId: string
  sessionId: string
  access: string
  refresh: string
}

/** The cookie of that name a response sets, if it sets one. */
export const cookie = (res: LightMyRequestResponse, name: string) => res.cookies.find((c) => c.name === name)

const cookieValue = (res: LightMyRequestResponse, name: string) => cookie(res, name)?.value ?? ''

export function sessionOf(res: LightMyRequestResponse): Session {
  expect(res.statusCode).toBe(200)
  const { userId, sessionId } = res.json()
  return {
    userId,
    sessionId,
    access: cookieValue(res, 'access_token'),
    refresh: cookieValue(res, 'refresh_token'),
  }
}

/** Signs the user in with their password (and OTP code); fails the test unless it is 200. */
export async function signIn(
  app: FastifyInstance,
  user: Pick<TestUser, 'email' | 'password'>,
  options: { otpCode?: string; userAgent?: string } = {},
): Promise<Session> {
  return sessionOf(await login(app, user.email, user.password, options))
}

/** A session together with the organization the login answered. */
export interface OrganizationSession extends Session {
  organizationId: string
}

/** Signs a new member of a new organization in; fails the test unless login answers that organization. */
export async function signInNewUser(app: FastifyInstance): Promise<OrganizationSession> {
  const user = await newUser(app)
  const res = await login(app, user.email, user.password)
  const session = sessionOf(res)
  expect(res.json().organizationId).toBe(user.organizationId)
  return { ...session, organizationId: user.organizationId }
}

/** A signed-in account, as the tests of one organization's roles use it. */
export interface Actor {
  user: TestUser
  session: Session
}

/** A signed-in account whose role tuple has been delivered to the authorization server. */
export async function newActor(
  app: FastifyInstance,
  options: { organizationId?: string; role?: Role } = {},
): Promise<Actor> {
  const user = await newUser(app, options)
  await app.authz.outbox.runOnce()
  return { user, session: await signIn(app, user) }
}

/** A valid access token of a made-up user and session in the organization, signed by the app. */
export function userAccessToken(app: FastifyInstance, organizationId: string): string {
  return app.services.tokens.issueUserToken({
    sub: randomUUID(),
    sid: randomUUID(),
    org: organizationId,
    ver: 0,
  }).token
}

/** A request as the signed-in user (access cookie), or unauthenticated with null. */
export function asUser(
  app: FastifyInstance,
  session: Session | null,
  options: InjectOptions,
): Promise<LightMyRequestResponse> {
  return app.inject({ ...options, ...(session ? { cookies: { access_token: session.access } } : {}) })
}

export function refresh(app: FastifyInstance, session: Session): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/refresh', cookies: { refresh_token: session.refresh } })
}

export function confirmPassword(
  app: FastifyInstance,
  token: string,
  newPassword: string,
): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/api/auth/password-reset/confirm',
    payload: { token, newPassword },
  })
}

export function expectProblem(res: LightMyRequestResponse, status: number, code: string): void {
  expect({ status: res.statusCode, code: res.json().code }).toEqual({ status, code })
  expect(res.headers['content-type']).toMatch(/^application\/problem\+json/)
}

/** Lets the work started after earlier responses finish, then delivers the mail outbox once. */
export async function deliverMail(t: TestApp): Promise<number> {
  await t.app.background.idle()
  return t.app.mail.worker.runOnce()
}

/** The messages the SMTP server accepted for an address (envelope recipient), oldest first. */
export async function mailsTo(smtp: TestSmtpServer, address: string): Promise<ParsedMail[]> {
  const mine = smtp.received.filter((m) =>
    m.recipients.some((r) => r.toLowerCase() === address.toLowerCase()),
  )
  return Promise.all(mine.map((m) => m.parsed()))
}

/** The raw messages (headers and body as sent) for an address. */
export function rawMailsTo(smtp: TestSmtpServer, address: string): string[] {
  return smtp.received
    .filter((m) => m.recipients.some((r) => r.toLowerCase() === address.toLowerCase()))
    .map((m) => m.raw.toString('utf8'))
}

/** The `token` of the one link to `FRONTEND_URL + path` in the message text. */
export function linkToken(mail: ParsedMail | undefined, path: string): string {
  const links = [...(mail?.text ?? '').matchAll(/https?:\/\/[^\s<>"]+/g)]
    .map(([href]) => new URL(href))
    .filter((url) => `${url.origin}${url.pathname}` === `${FRONTEND_URL}${path}`)
  expect(links).toHaveLength(1)
  const token = links[0]?.searchParams.get('token') ?? ''
  expect(token).not.toBe('')
  return token
}
