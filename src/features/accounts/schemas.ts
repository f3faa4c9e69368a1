import { Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'

/** An address as sent: stored and looked up as text, so no control characters (PostgreSQL refuses NUL). */
export const EmailAddress = (minLength: number) =>
  Type.String({ minLength, maxLength: 320, pattern: '^[^\\x00-\\x1f\\x7f]+$' })

export const InviteUserRequest = Type.Object(
  {
    email: EmailAddress(3),
    organizationId: Uuid,
    role: Type.Optional(Type.Union([Type.Literal('admin'), Type.Literal('member')], { default: 'member' })),
  },
  {
    additionalProperties: false,
    $id: 'InviteUserRequest',
    title: 'InviteUserRequest',
    description: 'Who to invite, and with which role',
  },
)

export const UserIdResponse = Type.Object(
  { userId: Uuid },
  {
    $id: 'UserIdResponse',
    title: 'UserIdResponse',
    description: 'The invited user (the invitation email is queued)',
  },
)
export const UserStateResponse = Type.Object(
  { userId: Uuid, active: Type.Boolean() },
  { $id: 'UserState', title: 'UserState', description: 'Whether the user may sign in' },
)
export const UserParams = Type.Object({ id: Uuid })
export const Empty = Type.Object(
  {},
  { additionalProperties: false, $id: 'Empty', title: 'Empty', description: 'Accepted; nothing to return' },
)
