// The scopes a machine principal (API key, service account) can hold; each route names the one it
// needs. Users are not scope-limited.
export const SCOPES = [
  'purchase_requests:read',
  'purchase_requests:write',
  'files:read',
  'files:write',
  'config:read',
  'config:write',
  'authz:check',
  'audit:read',
  'webhooks:write',
  /** POST /oauth2/introspect. */
  'tokens:introspect',
] as const

export type Scope = (typeof SCOPES)[number]

export function isScope(value: string): value is Scope {
  return (SCOPES as readonly string[]).includes(value)
}
