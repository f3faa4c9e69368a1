import type { FastifyReply } from 'fastify'
import type { Config } from '../../config.ts'
import type { IssuedSession } from './service.ts'

// The session cookies, access and refresh: both httpOnly; the refresh cookie is always SameSite=Lax and
// scoped to /api/auth, so it is sent to the auth endpoints only.

export const REFRESH_COOKIE_PATH = '/api/auth'

const sameSite = (value: Config['auth']['cookie']['sameSite']) =>
  value.toLowerCase() as 'strict' | 'lax' | 'none'

export function setSessionCookies(
  reply: FastifyReply,
  config: Config,
  session: IssuedSession,
  now: Date,
): void {
  const { cookie } = config.auth
  reply.setCookie(cookie.accessTokenName, session.accessToken.token, {
    httpOnly: true,
    secure: cookie.secure,
    sameSite: sameSite(cookie.sameSite),
    path: '/',
    maxAge: session.accessToken.expiresInSeconds,
  })
  reply.setCookie(cookie.refreshTokenName, session.refreshToken.raw, {
    httpOnly: true,
    secure: cookie.secure,
    sameSite: 'lax',
    path: REFRESH_COOKIE_PATH,
    maxAge: Math.max(0, Math.floor((session.refreshToken.expiresAt.getTime() - now.getTime()) / 1000)),
  })
  reply.header('cache-control', 'no-store')
}

export function clearSessionCookies(reply: FastifyReply, config: Config): void {
  const { cookie } = config.auth
  reply.clearCookie(cookie.accessTokenName, {
    httpOnly: true,
    secure: cookie.secure,
    sameSite: sameSite(cookie.sameSite),
    path: '/',
  })
  reply.clearCookie(cookie.refreshTokenName, {
    httpOnly: true,
    secure: cookie.secure,
    sameSite: 'lax',
    path: REFRESH_COOKIE_PATH,
  })
  reply.header('cache-control', 'no-store')
}

/** The body of every answer that signs someone in: who, never a token. */
export const sessionResponse = (session: IssuedSession) => ({
  userId: session.userId,
  organizationId: session.organizationId,
  sessionId: session.sessionId,
})

/**
 * A response that sets the session cookies: the access cookie (path `/`) and the refresh
 * cookie (path `/api/auth`), both httpOnly; clients never read them.
 */
export function withSessionCookies<T extends { description?: string }>(schema: T) {
  return {
    description: schema.description ?? 'Signed in',
    headers: {
      'Set-Cookie': {
        type: 'string',
        description:
          'The httpOnly access-token cookie (path /) and refresh-token cookie (path /api/auth), SameSite and Secure as configured (platform.auth.cookie.*)',
      },
    },
    content: { 'application/json': { schema } },
  }
}
