import { Type } from '@sinclair/typebox'
import { Cursor } from '../../db/paging.ts'
import { Uuid } from '../../uuid.ts'
import { USER_STATUSES } from './repository.ts'

const DateTime = Type.String({ format: 'date-time' })
const RoleName = Type.Union([Type.Literal('admin'), Type.Literal('member')])
const UserStatus = Type.Union(
  USER_STATUSES.map((status) => Type.Literal(status)),
  {
    description:
      'active; invited (has not accepted the invitation yet); deactivated; locked (too many failed sign-ins, until lockedUntil)',
  },
)

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

export const User = Type.Object(
  {
    id: Uuid,
    email: Type.String(),
    role: RoleName,
    status: UserStatus,
    lockedUntil: Type.Union([DateTime, Type.Null()], {
      description: 'When the lock ends; null unless locked',
    }),
    otpEnabled: Type.Boolean(),
    passkeyCount: Type.Integer({ minimum: 0 }),
    createdAt: DateTime,
  },
  {
    additionalProperties: false,
    title: 'User',
    description: "An account of the admin's organization",
  },
)

export const UserPage = Type.Object(
  {
    items: Type.Array(User),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'null on the last page' }),
  },
  {
    additionalProperties: false,
    title: 'UserPage',
    description: "A page of the organization's accounts, by email",
  },
)

export const UserListQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Page size' })),
    cursor: Type.Optional(Cursor),
    status: Type.Optional(UserStatus),
  },
  { additionalProperties: false },
)

export const UserRoleChange = Type.Object(
  { role: RoleName },
  {
    additionalProperties: false,
    $id: 'UserRoleChange',
    title: 'UserRoleChange',
    description: 'The role the user is to have',
  },
)

export const CurrentUser = Type.Object(
  {
    userId: Uuid,
    email: Type.String(),
    organizationId: Uuid,
    organizationName: Type.String(),
    role: RoleName,
    otpEnabled: Type.Boolean(),
    otpRequired: Type.Boolean({
      description:
        'Whether the role requires the second factor (platform.auth.otp.required-for-roles): it cannot be turned off',
    }),
    passkeyCount: Type.Integer({ minimum: 0 }),
    sessionId: Uuid,
    impersonatorId: Type.Union([Uuid, Type.Null()], {
      description:
        'The organization admin acting as this user in this session (impersonation); null otherwise',
    }),
  },
  {
    additionalProperties: false,
    title: 'CurrentUser',
    description: 'The signed-in user, its organization and the session the request was made in',
  },
)

export const PasswordChange = Type.Object(
  {
    currentPassword: Type.String({ minLength: 1, maxLength: 1024 }),
    newPassword: Type.String({ minLength: 1, maxLength: 1024 }),
  },
  {
    additionalProperties: false,
    $id: 'PasswordChange',
    title: 'PasswordChange',
    description: 'The current password, and the new one',
  },
)
