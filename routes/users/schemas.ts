import { Type } from '@sinclair/typebox'

const Uuid = Type.String({ format: 'uuid' })

export const InviteUserRequest = Type.Object(
  {
    email: Type.String({ minLength: 3, maxLength: 320 }),
    organizationId: Uuid,
    role: Type.Optional(Type.Union([Type.Literal('admin'), Type.Literal('member')], { default: 'member' })),
  },
  { additionalProperties: false },
)

export const UserIdResponse = Type.Object({ userId: Uuid })
export const UserStateResponse = Type.Object({ userId: Uuid, active: Type.Boolean() })
export const UserParams = Type.Object({ id: Uuid })
export const Empty = Type.Object({}, { additionalProperties: false })
