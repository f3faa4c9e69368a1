// The audit event types the service records (AUDIT_EVENT_TYPES in src/audit/trail.ts, which the
// browser cannot import: it runs on Node). Offered as suggestions in the audit filter and as
// choices for a webhook; any other type can still be typed. test/browser.console.test.ts keeps the
// two lists equal.

export const EVENT_TYPES = [
  'sign_in.succeeded',
  'sign_in.failed',
  'sign_in.locked',
  'refresh_token.reused',
  'session.revoked',
  'sessions.revoked_all',
  'password.reset',
  'password.changed',
  'two_factor.enabled',
  'two_factor.disabled',
  'backup_code.used',
  'passkey.added',
  'passkey.removed',
  'user.invited',
  'user.activated',
  'user.deactivated',
  'user.reactivated',
  'user.role_changed',
  'user.unlocked',
  'user.invitation_resent',
  'api_key.created',
  'api_key.revoked',
  'service_account.created',
  'service_account.disabled',
  'organization_config.changed',
  'purchase_request.created',
  'purchase_request.submitted',
  'purchase_request.approved',
  'file.confirmed',
  'webhook.created',
  'webhook.updated',
  'webhook.deleted',
  'webhook.secret_rotated',
  'webhook.disabled',
] as const

const WORDS: [RegExp, string][] = [
  [/^sign in\b/, 'sign-in'],
  [/^two factor\b/, 'two-factor'],
  [/^api key\b/, 'API key'],
]

/** "sign_in.failed" → "Sign-in failed", "api_key.created" → "API key created". */
export function describeEventType(type: string): string {
  let words = type.replaceAll(/[._]+/g, ' ')
  for (const [pattern, replacement] of WORDS) words = words.replace(pattern, replacement)
  return words.charAt(0).toUpperCase() + words.slice(1)
}
