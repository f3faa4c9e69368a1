// The audit event types, in a module of their own with no imports, so the console (a browser
// bundle) offers the same list the service records without copying it.

/** The events the service records (a deployment's own features may record types of their own). */
export const AUDIT_EVENT_TYPES = [
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
  'account.signed_up',
  'email.changed',
  'user.invited',
  'invitation.accepted',
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

export type AuditEventType = (typeof AUDIT_EVENT_TYPES)[number]
