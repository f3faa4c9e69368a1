// The passkeys feature: WebAuthn registration, sign-in and the user's passkeys under
// /api/auth/passkeys, and the passkey as a password login's second factor (bound in
// src/features/compose.ts).
import type { FastifyInstance } from 'fastify'
import passkeyRoutes from './routes.ts'

export { passkeyChallengeRetention } from './retention.ts'
export { counterAcceptable, type PasskeyRecord, PasskeyService } from './service.ts'

export default async function passkeysFeature(app: FastifyInstance) {
  await app.register(passkeyRoutes, { prefix: '/api/auth/passkeys' })
}
