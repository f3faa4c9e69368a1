import { Type } from '@sinclair/typebox'
import { PasskeyAssertionBody } from './schemas.ts'

/** Text looked up in the database: no control characters (PostgreSQL text refuses NUL). */
const NO_CONTROLS = '^[^\\x00-\\x1f\\x7f]+$'

const Address = Type.String({ minLength: 3, maxLength: 320, pattern: NO_CONTROLS })
const LinkToken = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: '^[A-Za-z0-9_-]+$',
  description: 'The `token` query parameter of the mailed link',
})
const Code = Type.String({ pattern: '^[0-9]{6}$', description: 'The six-digit code of the mail' })
const OtpCode = Type.Optional(
  Type.String({ maxLength: 64, description: 'TOTP code or unused backup code, when the account has OTP on' }),
)
// In place of otpCode: a passkey of the account answering a challenge from
// POST /api/auth/passkeys/authentication/options.
const Passkey = Type.Optional(PasskeyAssertionBody)

export const SignUpRequest = Type.Object(
  {
    email: Address,
    password: Type.String({ minLength: 1, maxLength: 1024 }),
    organizationName: Type.String({
      minLength: 1,
      maxLength: 400,
      description: 'Trimmed; 1 to 100 visible characters',
    }),
  },
  {
    additionalProperties: false,
    $id: 'SignUpRequest',
    title: 'SignUpRequest',
    description: 'The address to prove, the password of the first admin, and the new organization',
  },
)

export const EmailSignInRequest = Type.Object(
  { email: Address },
  {
    additionalProperties: false,
    $id: 'EmailSignInRequest',
    title: 'EmailSignInRequest',
    description: 'The address to mail a sign-in link and code to',
  },
)

/** A mailed proof: the link's token, or the address and the code. */
export const EmailProofBody = Type.Union(
  [
    Type.Object({ token: LinkToken }, { additionalProperties: false, title: 'EmailProofToken' }),
    Type.Object({ email: Address, code: Code }, { additionalProperties: false, title: 'EmailProofCode' }),
  ],
  {
    $id: 'EmailProof',
    title: 'EmailProof',
    description: "The mailed link's token, or the address the mail went to and its code",
  },
)

export const EmailSignInVerification = Type.Union(
  [
    Type.Object(
      { token: LinkToken, otpCode: OtpCode, passkey: Passkey },
      { additionalProperties: false, title: 'EmailSignInToken' },
    ),
    Type.Object(
      { email: Address, code: Code, otpCode: OtpCode, passkey: Passkey },
      { additionalProperties: false, title: 'EmailSignInCode' },
    ),
  ],
  {
    $id: 'EmailSignInVerification',
    title: 'EmailSignInVerification',
    description:
      "The mailed link's token, or the address and its code; and the second factor when the account has one, as at login",
  },
)

export const Accepted = Type.Object(
  {},
  {
    additionalProperties: false,
    $id: 'Accepted',
    title: 'Accepted',
    description: 'Accepted; the same answer whatever the address',
  },
)
