// The accounts feature: the account table, administration of an organization's users under
// /api/users (list, invite, role, unlock, deactivate, reactivate, reset), the account's own
// profile, password change, password reset and two-factor setup under /api/auth, its address
// change under /api/account, and the mailed proofs (link and code) of sign-up, email sign-in and
// email change.
import type { FastifyInstance } from 'fastify'
import accountRoutes from './account-routes.ts'
import emailRoutes from './email-routes.ts'
import userRoutes from './user-routes.ts'

export { AccountLinks } from './account-links.ts'
export {
  accountLocked,
  type EndOtherSessions,
  type EndUserSessions,
  normalizeEmail,
  organizationAdmin,
  roleTuple,
} from './accounts.ts'
export { EmailChanges } from './email-change.ts'
export {
  EMAIL_PROOF_PAGES,
  type EmailProof,
  EmailProofs,
  emailProofInvalid,
} from './email-proofs.ts'
export { NewPasswords } from './new-password.ts'
export { OtpService } from './otp.ts'
export { OwnAccount } from './own-account.ts'
export { type PasswordResetHandler, PasswordResets } from './password-reset.ts'
export {
  type AccountRow,
  claimLoginAttempt,
  findAccount,
  findAccountByEmail,
  findAccountsOfOrganization,
  findOwnAccount,
  findSessionVersion,
  incrementSessionVersion,
  insertAccountUnlessEmailTaken,
  listAccounts,
  lockAccountOfOrganization,
  settleLoginAttempt,
  updatePasswordHash,
} from './repository.ts'
export { emailProofRetention, oneTimeTokenRetention } from './retention.ts'
export { proofMethod, SignUps } from './sign-up.ts'
export { UserAdministration } from './users.ts'

export default async function accountsFeature(app: FastifyInstance) {
  await app.register(accountRoutes, { prefix: '/api/auth' })
  await app.register(userRoutes, { prefix: '/api/users' })
  await app.register(emailRoutes, { prefix: '/api/account' })
}
