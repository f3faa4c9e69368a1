// Decorates account management (`app.accounts`), the password-reset handler (`app.passwordReset`)
// and the TOTP second factor (`app.otp`), and plugs the second factor into the built-in
// authenticator; needs auth (passwords, authenticator) and mail (the outbox the emails go to).
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { jwtSecrets } from '../src/config.ts'
import { AccountManagement, type PasswordResetHandler } from '../src/services/account-management.ts'
import { OtpService } from '../src/services/otp.ts'
import { SecretBox } from '../src/services/secret-box.ts'

declare module 'fastify' {
  interface FastifyInstance {
    accounts: AccountManagement
    passwordReset: PasswordResetHandler
    otp: OtpService
  }
}

export interface AccountsPluginOptions {
  /** Extension point (spec 5.6): replaces the built-in reset on the account table. */
  passwordResetHandler?: PasswordResetHandler | undefined
}

async function accountsPlugin(app: FastifyInstance, options: AccountsPluginOptions) {
  const { db, clock, config, passwords } = app
  const accounts = new AccountManagement({
    db,
    clock,
    config,
    passwords,
    tuples: app.authz.tuples,
    sealMail: app.mail.seal,
  })
  const box = new SecretBox(jwtSecrets(config), 'otp-secret-encryption')
  const otp = new OtpService({ db, clock, config, box })
  app.accountAuthenticator.useSecondFactor((account, otpCode) => otp.verifyAtLogin(account, otpCode))
  app.decorate('accounts', accounts)
  app.decorate('passwordReset', options.passwordResetHandler ?? accounts)
  app.decorate('otp', otp)
}

export default fp(accountsPlugin, {
  name: 'accounts',
  fastify: '5.x',
  dependencies: ['auth', 'mail', 'background'],
})
