// The sessions feature: sign-in, refresh rotation, logout and the user's session list under
// /api/auth, the built-in credential check, session versions and the new-device notice.
import type { FastifyInstance } from 'fastify'
import type { Tx } from '../../db/schema.ts'
import emailRoutes from './email-routes.ts'
import { revokeSessions } from './repository.ts'
import sessionRoutes from './routes.ts'

export {
  AccountAuthenticator,
  type CredentialAuthenticator,
  type PasskeyAssertion,
  passkeyOrOtp,
  type SecondFactorCheck,
  secondFactorOfSignIn,
} from './authentication.ts'
export { clearSessionCookies, sessionResponse, setSessionCookies, withSessionCookies } from './cookies.ts'
export { EmailSignIns } from './email-sign-in.ts'
export { NewDeviceNotice } from './new-device-notice.ts'
export { refreshTokenRetention, sessionRetention } from './retention.ts'
export { PasskeyAssertionBody, SessionResponse } from './schemas.ts'
export {
  type ClientInfo,
  type IssuedSession,
  type PendingSession,
  type SessionPolicy,
  SessionService,
  type SignInContext,
  type SignInMethod,
  type SignInPolicy,
} from './service.ts'
export { SessionGate } from './session-gate.ts'
export { accountSessionVersions, bumpSessionVersion, type SessionVersionProvider } from './session-version.ts'

/**
 * Ends every active session of an account, in the caller's transaction, and announces it to every
 * instance (also when none was active: the caller may have changed the account itself).
 */
export function endUserSessions(trx: Tx, userId: string, now: Date, reason: string): Promise<string[]> {
  return revokeSessions(trx, { userId }, now, reason)
}

/**
 * Ends every active session of an account but the one kept (a password change keeps the session it
 * was made from), in the caller's transaction, and announces it to every instance.
 */
export function endOtherUserSessions(
  trx: Tx,
  userId: string,
  keepSessionId: string,
  now: Date,
  reason: string,
): Promise<string[]> {
  return revokeSessions(trx, { userId, exceptSessionId: keepSessionId }, now, reason)
}

export default async function sessionsFeature(app: FastifyInstance) {
  await app.register(sessionRoutes, { prefix: '/api/auth' })
  await app.register(emailRoutes, { prefix: '/api/auth' })
}
