import { Type } from '@sinclair/typebox'
import { PasskeyAssertionBody } from '../sessions/index.ts'

export const StartImpersonationRequest = Type.Object(
  {
    reason: Type.String({
      minLength: 3,
      maxLength: 500,
      pattern: '^[^\\x00-\\x1f\\x7f]+$',
      description: 'Why: recorded in the audit trail and mailed to the user',
    }),
    otpCode: Type.Optional(
      Type.String({
        maxLength: 64,
        description:
          "The admin's TOTP or backup code, when the admin has a second factor and did not sign in with it in the last 5 minutes",
      }),
    ),
    passkey: Type.Optional(PasskeyAssertionBody),
  },
  {
    additionalProperties: false,
    $id: 'StartImpersonationRequest',
    title: 'StartImpersonationRequest',
    description: 'The reason, and the admin’s second factor where one is needed',
  },
)
