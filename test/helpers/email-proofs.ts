import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { ParsedMail } from 'mailparser'
import { expect } from 'vitest'
import { FRONTEND_URL, linkToken } from './accounts.ts'

// Sign-up, email sign-in and email change over HTTP: the switches that turn them on, and the link
// and code their mails carry.

/** Sign-up and email sign-in on, with generous allowances for files that make many requests. */
export const EMAIL_PROOF_CONFIG = {
  'platform.auth.sign-up.enabled': 'true',
  'platform.auth.email-sign-in.enabled': 'true',
  'platform.auth.rate-limit.email-proof-per-minute': '1000',
  'platform.auth.rate-limit.email-proof-per-hour': '1000',
}

/** The console pages the mails link to. */
export const PAGES = {
  signUp: '/verify-sign-up',
  emailSignIn: '/email-sign-in',
  emailChange: '/verify-email',
} as const

export interface MailedProof {
  /** The link as mailed, under the frontend URL. */
  link: string
  token: string
  code: string
}

/** The link (to `FRONTEND_URL + page`) and the six-digit code of a proof mail. */
export function mailedProof(mail: ParsedMail | undefined, page: string): MailedProof {
  const token = linkToken(mail, page)
  const code = /\b(\d{6})\b/.exec(mail?.text ?? '')?.[1] ?? ''
  expect(code).toMatch(/^\d{6}$/)
  expect(mail?.html).toContain(code)
  return { link: `${FRONTEND_URL}${page}?token=${token}`, token, code }
}

/** The same link on the app itself (the console is served by the app), for `inject`. */
export const appPathOf = (link: string) => {
  const url = new URL(link)
  return `${url.pathname}${url.search}`
}

export function signUp(
  app: FastifyInstance,
  body: { email: string; password: string; organizationName: string },
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/sign-up', payload: body, headers })
}

export function verifySignUp(
  app: FastifyInstance,
  body: Record<string, unknown>,
): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/sign-up/verify', payload: body })
}

export function requestEmailSignIn(
  app: FastifyInstance,
  email: string,
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/email-sign-in', payload: { email }, headers })
}

export function verifyEmailSignIn(
  app: FastifyInstance,
  body: Record<string, unknown>,
): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/api/auth/email-sign-in/verify', payload: body })
}
