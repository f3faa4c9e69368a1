// The user session endpoints: login, refresh, logout, logout-all and session management.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { AppError, problemResponses } from '../../errors.ts'
import { statementLimits } from '../../http/rate-limit.ts'
import { requireUser } from '../../principal.ts'
import { clearSessionCookies, sessionResponse, setSessionCookies, withSessionCookies } from './cookies.ts'
import {
  LoginRequest,
  NoContent,
  ServiceTokenRequest,
  ServiceTokenResponse,
  SessionItem,
  SessionList,
  SessionParams,
  SessionResponse,
} from './schemas.ts'
import type { SignInMethod } from './service.ts'

const authRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(SessionItem)
  const { config, clock } = app
  const refreshCookie = config.auth.cookie.refreshTokenName

  app.post(
    '/login',
    {
      config: {
        public: true,
        // Checked before any password hash is computed. The per-account limit counts every attempt;
        // the per-IP one counts failures only, so an office behind one address can sign in.
        rateLimit: [
          { name: 'login:ip', by: 'ip', max: 'loginPerMinute', window: 'minute', failuresOnly: true },
          {
            name: 'login:account',
            by: { field: 'username', caseless: true },
            max: 'loginPerMinute',
            window: 'minute',
          },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'login',
        summary:
          'Sign in with email and password (and the OTP code or a passkey when OTP is on); sets the session cookies',
        body: LoginRequest,
        response: { 200: withSessionCookies(SessionResponse), ...problemResponses(401, 403, 429) },
      },
    },
    async (request, reply) => {
      const { username, password, otpCode, passkey } = request.body
      const user = await app.services.authenticator.authenticate({ username, password, otpCode, passkey })
      if (!user) throw new AppError('INVALID_CREDENTIALS', 'The email or password is not correct')
      const client = { userAgent: request.headers['user-agent'] ?? null, ipAddress: request.ip }
      const session = await app.services.sessions.start(user, client, user.signInMethod)
      app.background.run('new-device-check', () => app.services.newDeviceNotice.onLogin(user.userId, client))
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )

  app.post(
    '/refresh',
    {
      config: {
        public: true,
        // Counted by the rotation's own statement (SessionService.refresh), which rotates nothing over the limit.
        rateLimit: [
          { name: 'refresh:ip', by: 'ip', max: 'refreshPerMinute', window: 'minute', inStatement: true },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'refresh',
        summary: 'Rotate the refresh token and issue a new access token; restores the session at start-up',
        description:
          'Each refresh token is single use. Presenting a rotated token again revokes its whole session ' +
          '(401 REFRESH_TOKEN_REUSED), unless platform.auth.refresh.reuse-grace is set, the token was ' +
          'rotated within it and its successor has not been used: then it gets a new successor. ' +
          "Clients serialise refreshes. A session refreshed later than its organization's " +
          'security.session-max-age after its sign-in is revoked (401 REFRESH_TOKEN_INVALID); one ' +
          'refreshed from outside its security.ip-allowlist is revoked (403 IP_NOT_ALLOWED).',
        response: { 200: withSessionCookies(SessionResponse), ...problemResponses(401, 403, 429, 503) },
      },
    },
    async (request, reply) => {
      try {
        const session = await app.services.sessions.refresh(
          request.cookies[refreshCookie],
          statementLimits(request, config),
          request.ip,
        )
        setSessionCookies(reply, config, session, clock.now())
        return sessionResponse(session)
      } catch (error) {
        // The session is over: its cookies are of no use any more.
        if (error instanceof AppError && (error.status === 401 || error.code === 'IP_NOT_ALLOWED'))
          clearSessionCookies(reply, config)
        throw error
      }
    },
  )

  app.post(
    '/service-token',
    {
      config: {
        public: true,
        rateLimit: [
          { name: 'service-token:ip', by: 'ip', max: 'serviceTokenPerMinute', window: 'minute' },
          {
            name: 'service-token:client',
            by: { field: 'clientId' },
            max: 'serviceTokenPerMinute',
            window: 'minute',
          },
        ],
      },
      schema: {
        tags: ['service-accounts'],
        operationId: 'serviceToken',
        summary: 'Client-credentials grant for backends: a bearer token with the service audience',
        body: ServiceTokenRequest,
        response: { 200: ServiceTokenResponse, ...problemResponses(401, 429) },
      },
    },
    async (request, reply) => {
      const { clientId, clientSecret } = request.body
      const issued = await app.services.serviceAccounts.issueToken(clientId, clientSecret)
      reply.header('cache-control', 'no-store')
      return {
        accessToken: issued.token,
        tokenType: 'Bearer' as const,
        expiresInSeconds: issued.expiresInSeconds,
      }
    },
  )

  app.post(
    '/logout',
    {
      config: { public: true },
      schema: {
        tags: ['authentication'],
        operationId: 'logout',
        summary: 'Revoke the session of the presented refresh cookie and clear the cookies',
        response: {
          204: {
            type: 'null',
            description: 'Signed out; both cookies are cleared',
            headers: { 'Set-Cookie': { type: 'string', description: 'Expires both session cookies' } },
          },
        },
      },
    },
    async (request, reply) => {
      await app.services.sessions.logout(request.cookies[refreshCookie])
      clearSessionCookies(reply, config)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/logout-all',
    {
      config: { mfaEnrolment: true },
      schema: {
        tags: ['authentication'],
        operationId: 'logoutAll',
        summary: 'Revoke every session of the signed-in user',
        response: { 204: NoContent, ...problemResponses(401, 403) },
      },
    },
    async (request, reply) => {
      const user = requireUser(request)
      await app.services.sessions.logoutAll(user)
      clearSessionCookies(reply, config)
      return reply.code(204).send(null)
    },
  )

  app.get(
    '/sessions',
    {
      schema: {
        tags: ['authentication'],
        operationId: 'listSessions',
        summary: "The signed-in user's active sessions",
        response: { 200: SessionList, ...problemResponses(401, 403) },
      },
    },
    async (request) => {
      const user = requireUser(request)
      const sessions = await app.services.sessions.list(user.userId)
      return sessions.map((s) => ({
        sessionId: s.id,
        createdAt: s.created_at,
        lastUsedAt: s.last_used_at,
        expiresAt: s.refresh_expires_at,
        userAgent: s.user_agent,
        ipAddress: s.ip_address,
        signInMethod: s.sign_in_method as SignInMethod | null,
        current: s.id === user.sessionId,
        impersonatorId: s.impersonator_id,
      }))
    },
  )

  app.delete(
    '/sessions/:sessionId',
    {
      schema: {
        tags: ['authentication'],
        operationId: 'revokeSession',
        summary: "Revoke one of the signed-in user's sessions",
        params: SessionParams,
        response: { 204: NoContent, ...problemResponses(401, 403, 404) },
      },
    },
    async (request, reply) => {
      const user = requireUser(request)
      await app.services.sessions.revoke(user.userId, request.params.sessionId)
      if (request.params.sessionId === user.sessionId) clearSessionCookies(reply, config)
      return reply.code(204).send(null)
    },
  )
}

export default authRoutes
