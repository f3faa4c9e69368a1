// Self-service account endpoints: the signed-in user's profile and password change, password reset
// (confirm takes invitation tokens too), TOTP second factor.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses } from '../../errors.ts'
import { requireUser } from '../../principal.ts'
import { CurrentUser, EmailAddress, Empty, PasswordChange } from './schemas.ts'

const PasswordResetRequest = Type.Object(
  { email: EmailAddress(1) },
  {
    additionalProperties: false,
    $id: 'PasswordResetRequest',
    title: 'PasswordResetRequest',
    description: 'The account to email a reset link to',
  },
)

const NewPassword = Type.String({ minLength: 1, maxLength: 1024 })

const PasswordResetConfirmation = Type.Union(
  [
    Type.Object(
      {
        token: Type.String({
          minLength: 1,
          maxLength: 200,
          description: 'The `token` query parameter of the mailed link',
        }),
        newPassword: NewPassword,
      },
      { additionalProperties: false, title: 'PasswordResetByToken' },
    ),
    Type.Object(
      {
        email: EmailAddress(3),
        code: Type.String({ pattern: '^[0-9]{6}$', description: 'The six-digit code of the mail' }),
        newPassword: NewPassword,
      },
      { additionalProperties: false, title: 'PasswordResetByCode' },
    ),
  ],
  {
    $id: 'PasswordResetConfirmation',
    title: 'PasswordResetConfirmation',
    description:
      "The mailed link's token, or the address the invitation or reset went to and its code; and the new password",
  },
)

const OtpSetup = Type.Object(
  {
    secret: Type.String({ description: 'Base32 secret, for manual entry' }),
    otpauthUri: Type.String(),
    qrCodeSvg: Type.String({ description: 'The otpauth URI as an SVG QR code' }),
  },
  { $id: 'OtpSetup', title: 'OtpSetup', description: 'A new TOTP secret, inactive until enabled' },
)

const OtpEnableRequest = Type.Object(
  { code: Type.String({ minLength: 1, maxLength: 16 }) },
  {
    additionalProperties: false,
    $id: 'OtpEnableRequest',
    title: 'OtpEnableRequest',
    description: 'A current code of the new secret',
  },
)

const BackupCodes = Type.Object(
  { backupCodes: Type.Array(Type.String(), { minItems: 10, maxItems: 10 }) },
  { $id: 'BackupCodes', title: 'BackupCodes', description: 'Ten single-use backup codes, shown once' },
)

const accountRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/me',
    {
      schema: {
        tags: ['authentication'],
        operationId: 'getCurrentUser',
        summary: 'The signed-in user: account, organization, role, second factors and the current session',
        response: { 200: CurrentUser, ...problemResponses(401, 403, 404) },
      },
    },
    async (request) => {
      const user = requireUser(request)
      const account = await app.services.ownAccount.me(user)
      return {
        userId: account.id,
        email: account.email,
        organizationId: account.organization_id,
        organizationName: account.organization_name,
        role: account.role,
        otpEnabled: account.otp_enabled,
        otpRequired: app.config.auth.otp.requiredForRoles.includes(account.role),
        passkeyCount: account.passkey_count,
        sessionId: user.sessionId,
      }
    },
  )

  app.post(
    '/password/change',
    {
      config: {
        rateLimit: [{ name: 'password-change:ip', by: 'ip', max: 'resetPerMinute', window: 'minute' }],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'changePassword',
        summary: "Change the signed-in user's password; ends the user's other sessions",
        description:
          'The current password is checked as a sign-in checks it: a wrong one is 401 INVALID_CREDENTIALS ' +
          'and counts toward the lockout (401 ACCOUNT_LOCKED). The new one must meet the policy (400 ' +
          'WEAK_PASSWORD). The session of the request stays signed in; every other session is revoked.',
        body: PasswordChange,
        response: {
          204: { type: 'null', description: 'Changed; the password-changed notice is queued' },
          ...problemResponses(400, 401, 403, 404, 429),
        },
      },
    },
    async (request, reply) => {
      const { currentPassword, newPassword } = request.body
      await app.services.ownAccount.changePassword(requireUser(request), currentPassword, newPassword)
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/password-reset/request',
    {
      config: {
        public: true,
        rateLimit: [
          { name: 'reset:ip', by: 'ip', max: 'resetPerMinute', window: 'minute' },
          {
            name: 'reset:account',
            by: { field: 'email', caseless: true },
            max: 'resetPerHour',
            window: 'hour',
          },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'requestPasswordReset',
        summary: 'Email a reset link; answers 202 whether or not the account exists',
        body: PasswordResetRequest,
        response: { 202: Empty, ...problemResponses(429) },
      },
    },
    async (request, reply) => {
      const email = request.body.email.trim().toLowerCase()
      // The lookup and the email happen after the response, so its timing says nothing about
      // whether the account exists.
      app.background.run('password-reset-request', () => app.services.passwordReset.request(email))
      return reply.code(202).send({})
    },
  )

  app.post(
    '/password-reset/confirm',
    {
      config: {
        public: true,
        rateLimit: [{ name: 'reset-confirm:ip', by: 'ip', max: 'resetPerMinute', window: 'minute' }],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'confirmPasswordReset',
        summary: 'Set a new password with the link or code of an invitation or reset mail',
        body: PasswordResetConfirmation,
        response: { 200: Empty, ...problemResponses(400, 429) },
      },
    },
    async (request) => {
      const { newPassword, ...proof } = request.body
      await app.services.passwordReset.confirm(proof, newPassword)
      return {}
    },
  )

  app.post(
    '/otp/setup',
    {
      schema: {
        tags: ['authentication'],
        operationId: 'setupOtp',
        summary: 'Generate a TOTP secret (not active until enabled with a valid code)',
        response: {
          200: OtpSetup,
          ...problemResponses(401, 403, 404, 409),
        },
      },
    },
    async (request, reply) => {
      reply.header('cache-control', 'no-store')
      return app.services.otp.setup(requireUser(request).userId)
    },
  )

  app.post(
    '/otp/enable',
    {
      schema: {
        tags: ['authentication'],
        operationId: 'enableOtp',
        summary: 'Turn the second factor on with a valid code; returns 10 single-use backup codes once',
        body: OtpEnableRequest,
        response: {
          200: BackupCodes,
          ...problemResponses(400, 401, 403, 404, 409),
        },
      },
    },
    async (request, reply) => {
      reply.header('cache-control', 'no-store')
      return app.services.otp.enable(requireUser(request).userId, request.body.code)
    },
  )

  app.post(
    '/otp/disable',
    {
      schema: {
        tags: ['authentication'],
        operationId: 'disableOtp',
        summary: 'Turn the second factor off (403 OTP_REQUIRED_FOR_ROLE for roles that require it)',
        response: { 200: Empty, ...problemResponses(401, 403, 404, 409) },
      },
    },
    async (request) => {
      await app.services.otp.disable(requireUser(request).userId)
      return {}
    },
  )
}

export default accountRoutes
