import { type Static, Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'
import { CONFIG_KEY_PATTERN, CONFIG_VALUE_MAX_BYTES, type OrganizationConfigEntry } from './config.ts'

const DateTime = Type.String({ format: 'date-time' })

export const ConfigKey = Type.String({
  pattern: CONFIG_KEY_PATTERN,
  description: 'Lower-case letters, digits, dots, underscores and hyphens; 1 to 128 characters',
  examples: ['purchase_request.approval_email_subject'],
})

export const OrganizationParams = Type.Object({ orgId: Uuid })
export const ConfigEntryParams = Type.Object({ orgId: Uuid, key: ConfigKey })

export const ConfigWriteQuery = Type.Object(
  {
    confirm: Type.Optional(
      Type.Boolean({
        description:
          'Store a value its key refuses for the request writing it (an IP allowlist that leaves out your address)',
      }),
    ),
  },
  { additionalProperties: false },
)

export const PutConfigRequest = Type.Object(
  {
    value: Type.String({
      maxLength: CONFIG_VALUE_MAX_BYTES,
      description: `Any text up to ${CONFIG_VALUE_MAX_BYTES} bytes in UTF-8, without NUL characters`,
    }),
  },
  {
    additionalProperties: false,
    $id: 'PutConfigRequest',
    title: 'PutConfigRequest',
    description: 'The new value of the entry',
  },
)

export const ConfigEntry = Type.Object(
  { key: Type.String(), value: Type.String(), updatedAt: DateTime },
  {
    $id: 'ConfigEntry',
    title: 'ConfigEntry',
    description: 'A configuration entry of the organization',
  },
)

export const ConfigEntryList = Type.Object(
  { items: Type.Array(Type.Ref(ConfigEntry)) },
  {
    $id: 'ConfigEntryList',
    title: 'ConfigEntryList',
    description: "The organization's configuration entries, by key",
  },
)

export const NoContent = Type.Null({ description: 'No content' })

export function toConfigEntry(entry: OrganizationConfigEntry): Static<typeof ConfigEntry> {
  return { key: entry.key, value: entry.value, updatedAt: entry.updatedAt.toISOString() }
}
