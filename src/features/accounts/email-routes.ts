// The signed-in user's email address change: a proof mailed to the new address, verified by the
// same account.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { problemResponses } from '../../errors.ts'
import { refuseWhileImpersonating } from '../../http/impersonation.ts'
import { requireUser } from '../../principal.ts'
import { EmailAddress } from './schemas.ts'

const EmailChangeRequest = Type.Object(
  {
    newEmail: EmailAddress(3),
    currentPassword: Type.String({ minLength: 1, maxLength: 1024 }),
  },
  {
    additionalProperties: false,
    $id: 'EmailChangeRequest',
    title: 'EmailChangeRequest',
    description: 'The address to move to, and the current password',
  },
)

const EmailChangeVerification = Type.Union(
  [
    Type.Object(
      { token: Type.String({ minLength: 1, maxLength: 200, pattern: '^[A-Za-z0-9_-]+$' }) },
      { additionalProperties: false, title: 'EmailChangeToken' },
    ),
    Type.Object(
      { email: EmailAddress(3), code: Type.String({ pattern: '^[0-9]{6}$' }) },
      { additionalProperties: false, title: 'EmailChangeCode' },
    ),
  ],
  {
    $id: 'EmailChangeVerification',
    title: 'EmailChangeVerification',
    description: "The token of the link mailed to the new address, or the new address and the mail's code",
  },
)

const EmailChangeAccepted = Type.Object(
  {},
  {
    additionalProperties: false,
    $id: 'EmailChangeAccepted',
    title: 'EmailChangeAccepted',
    description: 'Accepted; the same answer whether or not the new address has an account',
  },
)

const emailRoutes: FastifyPluginAsyncTypebox = async (app) => {
  refuseWhileImpersonating(app, { reads: true })
  app.post(
    '/email',
    {
      config: {
        rateLimit: [
          { name: 'email-change:ip', by: 'ip', max: 'emailProofPerMinute', window: 'minute' },
          {
            name: 'email-change:address',
            by: { field: 'newEmail', caseless: true },
            max: 'emailProofPerHour',
            window: 'hour',
          },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'requestEmailChange',
        summary: "Ask to change the signed-in user's address: mails a link and code to the new one",
        description:
          'The current password is checked as a sign-in checks it (401 INVALID_CREDENTIALS, counted toward ' +
          'the lockout; 401 ACCOUNT_LOCKED). Answers 202 whether or not the new address has an account: a ' +
          'new address is mailed a link to the console and a six-digit code, and the current address a ' +
          'notice; an address that has an account is mailed a notice instead and nothing changes.',
        body: EmailChangeRequest,
        response: { 202: EmailChangeAccepted, ...problemResponses(400, 401, 403, 404, 429) },
      },
    },
    async (request, reply) => {
      const { newEmail, currentPassword } = request.body
      const pending = await app.services.emailChanges.prepare(requireUser(request), newEmail, currentPassword)
      // Whether the new address has an account is looked at after the answer.
      app.background.run('email-change', () => app.services.emailChanges.send(pending))
      return reply.code(202).send({})
    },
  )

  app.post(
    '/email/verify',
    {
      config: {
        rateLimit: [
          {
            name: 'email-proof:ip',
            by: 'ip',
            max: 'loginPerMinute',
            window: 'minute',
            failuresOnly: true,
          },
        ],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'verifyEmailChange',
        summary: "Prove the new address: the signed-in user's account moves to it",
        description:
          'Signed in as the account that asked. Ends every other session of the account and the links mailed ' +
          'to the former address, which is mailed a notice. 400 EMAIL_PROOF_INVALID for an unknown, used, ' +
          "expired or retired proof, one ended by too many wrong codes, or another account's; 409 " +
          'ACCOUNT_EXISTS when the address has got an account since the request.',
        body: EmailChangeVerification,
        response: {
          204: { type: 'null', description: 'Changed' },
          ...problemResponses(400, 401, 403, 404, 409, 429),
        },
      },
    },
    async (request, reply) => {
      const body = request.body
      const proof = 'token' in body ? { token: body.token } : { email: body.email, code: body.code }
      await app.services.emailChanges.verify(requireUser(request), proof)
      return reply.code(204).send(null)
    },
  )
}

export default emailRoutes
