// The audit event types the service records, offered as suggestions in the audit filter and as
// choices for a webhook; any other type can still be typed.
import { AUDIT_EVENT_TYPES } from '../../src/audit/event-types.ts'

export const EVENT_TYPES = AUDIT_EVENT_TYPES

const WORDS: [RegExp, string][] = [
  [/^sign in\b/, 'sign-in'],
  [/^two factor\b/, 'two-factor'],
  [/^api key\b/, 'API key'],
  [/^sso\b/, 'SSO'],
]

/** "sign_in.failed" → "Sign-in failed", "api_key.created" → "API key created". */
export function describeEventType(type: string): string {
  let words = type.replaceAll(/[._]+/g, ' ')
  for (const [pattern, replacement] of WORDS) words = words.replace(pattern, replacement)
  return words.charAt(0).toUpperCase() + words.slice(1)
}
