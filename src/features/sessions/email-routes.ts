// Sign-up and sign-in with a mailed proof (a console link and a six-digit code): requests answer
// 202 the same for every address, verifications sign in as login does. Each pair is switched on by
// its own property (platform.auth.sign-up.enabled, platform.auth.email-sign-in.enabled); off, its
// routes answer 404 NOT_FOUND before anything is counted or read.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { onRequestHookHandler } from 'fastify'
import { AppError, problemResponses } from '../../errors.ts'
import type { RateLimitRule } from '../../http/rate-limit.ts'
import { type EmailProof, proofMethod } from '../accounts/index.ts'
import { sessionResponse, setSessionCookies, withSessionCookies } from './cookies.ts'
import {
  Accepted,
  EmailProofBody,
  EmailSignInRequest,
  EmailSignInVerification,
  SignUpRequest,
} from './email-schemas.ts'
import { SessionResponse } from './schemas.ts'

/** The proof a verify body carries, without the second factor's fields. */
const proofOf = (body: { token: string } | { email: string; code: string }): EmailProof =>
  'token' in body ? { token: body.token } : { email: body.email, code: body.code }

// Checked before any password is hashed or mail queued: per client address, and per address mailed.
const mailingLimits = (name: string): RateLimitRule[] => [
  { name: `${name}:ip`, by: 'ip', max: 'emailProofPerMinute', window: 'minute' },
  {
    name: `${name}:address`,
    by: { field: 'email', caseless: true },
    max: 'emailProofPerHour',
    window: 'hour',
  },
]

const emailRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, clock } = app
  const enabled =
    (on: boolean, what: string): onRequestHookHandler =>
    (_request, _reply, done) =>
      done(on ? undefined : new AppError('NOT_FOUND', `${what} is not enabled on this service`))
  const signUpEnabled = enabled(config.auth.signUp.enabled, 'Sign-up')
  const emailSignInEnabled = enabled(config.auth.emailSignIn.enabled, 'Email sign-in')
  const client = (request: { headers: Record<string, unknown>; ip: string }) => ({
    userAgent: (request.headers['user-agent'] as string | undefined) ?? null,
    ipAddress: request.ip,
  })

  app.post(
    '/sign-up',
    {
      onRequest: signUpEnabled,
      config: { public: true, rateLimit: mailingLimits('sign-up') },
      schema: {
        tags: ['authentication'],
        operationId: 'signUp',
        summary: 'Sign up: a new organization and its first admin, once the address is proved',
        description:
          'Answers 202 with the same body and headers whether or not the address has an account, and sets ' +
          'no cookie. A new address is mailed a link to the console and a six-digit code (either proves it, ' +
          'once, within platform.auth.email-proof.ttl); nothing exists until then. An address that has an ' +
          'account is mailed a notice instead and nothing changes. The password must meet the policy (400 ' +
          'WEAK_PASSWORD); the organization name is trimmed and 1 to 100 visible characters (400 ' +
          'VALIDATION_FAILED). 404 NOT_FOUND while platform.auth.sign-up.enabled is false.',
        body: SignUpRequest,
        response: { 202: Accepted, ...problemResponses(400, 404, 429) },
      },
    },
    async (request, reply) => {
      // Checked and hashed here, for every address alike; who has an account is looked at after the answer.
      const pending = await app.services.signUps.prepare(request.body)
      app.background.run('sign-up', () => app.services.signUps.send(pending))
      return reply.code(202).send({})
    },
  )

  app.post(
    '/sign-up/verify',
    {
      onRequest: signUpEnabled,
      config: {
        public: true,
        rateLimit: [
          { name: 'email-proof:ip', by: 'ip', max: 'loginPerMinute', window: 'minute', failuresOnly: true },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'verifySignUp',
        summary: 'Prove the sign-up address: creates the organization and its admin, and signs in',
        description:
          "Takes the mailed link's token, or the address and the code. Creates the organization and its first " +
          'admin (active) and signs the admin in, with the cookies of login. 400 EMAIL_PROOF_INVALID for an ' +
          'unknown, used, expired or retired proof, or one ended by platform.auth.email-proof.max-attempts ' +
          'wrong codes. 409 ACCOUNT_EXISTS when the address has had an account since the sign-up (an ' +
          'invitation accepted first): nothing is created and the address is mailed a notice. 404 NOT_FOUND ' +
          'while platform.auth.sign-up.enabled is false.',
        body: EmailProofBody,
        response: {
          200: withSessionCookies(SessionResponse),
          ...problemResponses(400, 403, 404, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const proof = proofOf(request.body)
      const user = await app.services.signUps.verify(proof)
      const session = await app.services.sessions.start(user, client(request), proofMethod(proof))
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )

  app.post(
    '/email-sign-in',
    {
      onRequest: emailSignInEnabled,
      config: { public: true, rateLimit: mailingLimits('email-sign-in') },
      schema: {
        tags: ['authentication'],
        operationId: 'requestEmailSignIn',
        summary: 'Mail a sign-in link and code; answers 202 whatever the address',
        description:
          'Answers 202 with the same body and headers for a known, an unknown and a deactivated address; only ' +
          'an active account is mailed a link to the console and a six-digit code. 404 NOT_FOUND while ' +
          'platform.auth.email-sign-in.enabled is false.',
        body: EmailSignInRequest,
        response: { 202: Accepted, ...problemResponses(400, 404, 429) },
      },
    },
    async (request, reply) => {
      const { email } = request.body
      // The lookup and the mail happen after the answer, so its timing says nothing of the address.
      app.background.run('email-sign-in', () => app.services.emailSignIns.send(email))
      return reply.code(202).send({})
    },
  )

  app.post(
    '/email-sign-in/verify',
    {
      onRequest: emailSignInEnabled,
      config: {
        public: true,
        // The limits of login, shared with it: failures per client address, attempts per account.
        rateLimit: [
          { name: 'login:ip', by: 'ip', max: 'loginPerMinute', window: 'minute', failuresOnly: true },
          {
            name: 'login:account',
            by: { field: 'email', caseless: true, optional: true },
            max: 'loginPerMinute',
            window: 'minute',
          },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'verifyEmailSignIn',
        summary:
          'Sign in with the mailed link or code (and the second factor when required); sets the cookies',
        description:
          'Counts as a sign-in attempt toward the lockout and the login rate limits. An account with a second ' +
          'factor needs otpCode or passkey as login does (401 OTP_REQUIRED keeps the proof usable; 401 ' +
          'INVALID_OTP). 400 EMAIL_PROOF_INVALID for an unknown, used, expired or retired proof, or one ended ' +
          'by too many wrong codes; 401 ACCOUNT_LOCKED with Retry-After. 404 NOT_FOUND while ' +
          'platform.auth.email-sign-in.enabled is false.',
        body: EmailSignInVerification,
        response: {
          200: withSessionCookies(SessionResponse),
          ...problemResponses(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const { otpCode, passkey } = request.body
      const user = await app.services.emailSignIns.verify(proofOf(request.body), { otpCode, passkey })
      const session = await app.services.sessions.start(user, client(request), user.signInMethod)
      app.background.run('new-device-check', () =>
        app.services.newDeviceNotice.onLogin(user.userId, client(request)),
      )
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )
}

export default emailRoutes
