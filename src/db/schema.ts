import type { ColumnType, Generated, Kysely, Transaction } from 'kysely'

// One interface per table, assembled into `Database`. SQL is snake_case; the API maps to
// camelCase next to each route. A feature that owns its tables declares them in its own folder and
// adds them to `Database` there (declaration merging, as src/features/purchase-requests/tables.ts
// does), so that copying the folder brings them along.

export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>

export interface OrganizationTable {
  id: Generated<string>
  name: string
  created_at: Timestamp
}

export type Role = 'admin' | 'member'

export interface AccountTable {
  id: Generated<string>
  organization_id: string
  email: string
  password_hash: string
  role: Role
  active: Generated<boolean>
  failed_attempts: Generated<number>
  locked_until: Timestamp | null
  otp_secret: string | null
  otp_enabled: Generated<boolean>
  otp_last_step: string | null
  session_version: Generated<number>
  /** Login attempts refused while locked, since the lock was set. */
  refused_attempts: Generated<number>
  /** Set while an admin has deactivated the account; null for active and invited accounts. */
  deactivated_at: Timestamp | null
  created_at: Timestamp
  updated_at: Timestamp
}

export interface SessionTable {
  id: Generated<string>
  user_id: string
  organization_id: string
  created_at: Timestamp
  last_used_at: Timestamp
  expires_at: Timestamp
  revoked_at: Timestamp | null
  revoked_reason: string | null
  user_agent: string | null
  ip_address: string | null
  /** How the session was signed in to (SignInMethod); null for sessions from before it was kept. */
  sign_in_method: string | null
  /** The organization admin who holds this session as its user; null for the user's own sessions. */
  impersonator_id: Generated<string | null>
  /** The admin's own session an impersonation was started from, and returns to when stopped. */
  impersonator_session_id: Generated<string | null>
  impersonation_reason: Generated<string | null>
}

export interface RefreshTokenTable {
  id: Generated<string>
  session_id: string
  /** The token this one succeeded; null for the session's first. */
  parent_id: string | null
  token_hash: string
  created_at: Timestamp
  expires_at: Timestamp
  rotated_at: Timestamp | null
  revoked_at: Timestamp | null
}

export interface RateLimitTable {
  key: string
  window_start: Timestamp
  count: number
}

export interface ServiceAccountTable {
  id: Generated<string>
  client_id: string
  secret_hash: string
  scopes: string[]
  description: string
  active: Generated<boolean>
  created_at: Timestamp
  disabled_at: Timestamp | null
}

export interface ApiKeyTable {
  id: Generated<string>
  organization_id: string
  key_prefix: string
  key_hash: string
  scopes: string[]
  description: string
  expires_at: Timestamp | null
  revoked_at: Timestamp | null
  last_used_at: Timestamp | null
  created_at: Timestamp
}

export interface AuthzOutboxTable {
  id: Generated<string>
  operation: 'write' | 'delete'
  subject: string
  relation: string
  object: string
  created_at: Timestamp
  attempts: Generated<number>
  next_attempt_at: Timestamp
  processed_at: Timestamp | null
  /** Dead letter: set with processed_at when the model rejected the change (it is never retried). */
  failed_at: Timestamp | null
  last_error: string | null
}

/** A tuple of the embedded authorization evaluator; subject_relation is '' unless the subject is a userset. */
export interface AuthzTupleTable {
  object_type: string
  object_id: string
  relation: string
  subject_type: string
  subject_id: string
  subject_relation: Generated<string>
  created_at: Timestamp
}

export interface PasskeyTable {
  id: Generated<string>
  account_id: string
  organization_id: string
  /** base64url, as the browser reports it. */
  credential_id: string
  public_key: Uint8Array
  /** int8, read as text. */
  counter: ColumnType<string, number | string, number | string>
  transports: string[]
  device_type: 'singleDevice' | 'multiDevice'
  backed_up: boolean
  aaguid: string
  name: string
  created_at: Timestamp
  last_used_at: Timestamp | null
}

export interface PasskeyChallengeTable {
  id: Generated<string>
  ceremony: 'registration' | 'authentication'
  challenge: string
  /** Registration: the session that asked. */
  session_id: string | null
  /** Registration: the user; authentication: the account its username named (null: any). */
  account_id: string | null
  created_at: Timestamp
  expires_at: Timestamp
}

export interface AuditEventTable {
  id: string
  /** The organization's id, or `system` for events of no organization. */
  chain: string
  /** int8, read as text; null until the chainer gives the event its place (src/audit/chainer.ts). */
  sequence: ColumnType<string | null, number | null | undefined, number>
  /** int8, read as text: the order events were written in (null on events chained when written). */
  position: ColumnType<string | null, never, never>
  organization_id: string | null
  occurred_at: Timestamp
  type: string
  actor_type: 'user' | 'api_key' | 'service_account' | 'system'
  actor_id: string | null
  subject_type: string | null
  subject_id: string | null
  ip_address: string | null
  user_agent: string | null
  request_id: string | null
  data: ColumnType<Record<string, unknown>, string, string>
  key_id: string | null
  previous_hash: string | null
  hash: string | null
}

export interface AuditChainHeadTable {
  chain: string
  sequence: ColumnType<string, number, number>
  hash: string
}

export type OneTimeTokenPurpose = 'INVITATION' | 'PASSWORD_RESET'

export interface OneTimeTokenTable {
  id: Generated<string>
  account_id: string
  purpose: OneTimeTokenPurpose
  token_hash: string
  /** The mailed code's hash, salted with `token_hash`; null on tokens issued without a code. */
  code_hash: string | null
  /** Wrong codes tried; at `platform.auth.email-proof.max-attempts` the token is spent. */
  attempts: Generated<number>
  created_at: Timestamp
  expires_at: Timestamp
  used_at: Timestamp | null
}

export type EmailProofPurpose = 'SIGN_UP' | 'EMAIL_SIGN_IN' | 'EMAIL_CHANGE'

/** A mailed proof of an address: a link token and a code, both hashed (src/features/accounts/email-proofs.ts). */
export interface EmailProofTable {
  id: Generated<string>
  purpose: EmailProofPurpose
  /** The address the proof was mailed to (for an email change, the new one). */
  email: string
  /** The account it acts on; null for a sign-up, which has none yet. */
  account_id: string | null
  token_hash: string
  code_hash: string
  /** Codes tried: wrong ones stay counted, and the proof ends when they reach the maximum. */
  attempts: Generated<number>
  /** What the proof completes: a sign-up's password hash and organization name. */
  data: ColumnType<Record<string, unknown>, string | undefined, string>
  created_at: Timestamp
  expires_at: Timestamp
  used_at: Timestamp | null
}

export interface OtpBackupCodeTable {
  id: Generated<string>
  account_id: string
  code_hash: string
  created_at: Timestamp
  used_at: Timestamp | null
}

export interface KnownDeviceTable {
  account_id: string
  device_hash: string
  first_seen_at: Timestamp
  last_seen_at: Timestamp
}

export interface IdempotencyKeyTable {
  principal_id: string
  key: string
  fingerprint: string
  /** Null while the first request with the key runs. */
  status: number | null
  location: string | null
  body: string | null
  created_at: Timestamp
}

export interface WorkerLeaseTable {
  name: string
  holder: string
  lease_until: Timestamp
}

export interface OrganizationConfigTable {
  organization_id: string
  key: string
  value: string
  updated_at: Timestamp
}

// The mail outbox (migration 0005).

/** Template data as stored: any JSON object, written as a JSON string, read back parsed. */
export type MailData = ColumnType<Record<string, unknown>, string, string>

export interface MailOutboxTable {
  /** bigserial: int8 stays a string on both drivers. */
  id: Generated<string>
  template: string
  recipient: string
  data: MailData
  organization_id: string | null
  created_at: Timestamp
  /** Delivery attempts started (counted when a row is claimed). */
  attempts: Generated<number>
  next_attempt_at: Timestamp
  /** Set while a worker holds the row; an expired lease makes the row claimable again. */
  lease_until: Timestamp | null
  sent_at: Timestamp | null
  /** Set when delivery was given up (attempts exhausted, or a message that can never be rendered). */
  failed_at: Timestamp | null
  last_error: string | null
  /** Stable across retries: the left part of the Message-ID header. */
  message_id: Generated<string>
}

// Files (migration 0008).

/**
 * The file lifecycle: PENDING from initiate until confirm finds the bytes; then CONFIRMED (size
 * recorded), or REJECTED when the object was larger than platform.storage.max-file-size (the
 * object is deleted). CONFIRMED and REJECTED are final.
 */
export type FileStatus = 'PENDING' | 'CONFIRMED' | 'REJECTED'

export interface FileTable {
  id: string
  organization_id: string
  resource_type: string
  resource_id: string
  object_key: string
  original_file_name: string
  content_type: string
  status: FileStatus
  /** bigint: int8 stays a string on both drivers; null until confirm. */
  size_bytes: ColumnType<string | null, number | null | undefined, number | null>
  /** The principal id of the uploader (a user id or an API key id). */
  created_by: string
  created_at: Timestamp
  confirmed_at: Timestamp | null
}

/** An account's identity at an OpenID Connect provider: (issuer, subject), never the email. */
export interface FederatedIdentityTable {
  id: Generated<string>
  organization_id: string
  account_id: string
  issuer: string
  subject: string
  /** What it came through: `platform:<id>` for a deployment-wide provider, or another registered kind. */
  provider_ref: string
  /** The organization connection it came through, for a connection's identities. */
  connection_id: string | null
  /** The address the provider gave at link time (shown to the user; never used to find the account). */
  email: string | null
  created_at: Timestamp
  last_used_at: Timestamp | null
}

/** An authorization request in flight, or a provider sign-in waiting for its second factor. */
export interface OidcFlowTable {
  id: Generated<string>
  handle_hash: string
  purpose: 'sign_in' | 'link' | 'second_factor'
  provider_ref: string
  state: string | null
  nonce: string | null
  code_verifier: string | null
  /** A link's signed-in account, or the account waiting for its second factor. */
  account_id: string | null
  /** A link's session: the flow finishes only in it. */
  session_id: string | null
  created_at: Timestamp
  expires_at: Timestamp
}

export interface Database {
  organizations: OrganizationTable
  accounts: AccountTable
  sessions: SessionTable
  refresh_tokens: RefreshTokenTable
  passkeys: PasskeyTable
  audit_events: AuditEventTable
  audit_chain_heads: AuditChainHeadTable
  passkey_challenges: PasskeyChallengeTable
  rate_limits: RateLimitTable
  service_accounts: ServiceAccountTable
  api_keys: ApiKeyTable
  authz_outbox: AuthzOutboxTable
  authz_tuples: AuthzTupleTable
  mail_outbox: MailOutboxTable
  one_time_tokens: OneTimeTokenTable
  email_proofs: EmailProofTable
  otp_backup_codes: OtpBackupCodeTable
  known_devices: KnownDeviceTable
  worker_leases: WorkerLeaseTable
  organization_config: OrganizationConfigTable
  files: FileTable
  idempotency_keys: IdempotencyKeyTable
  federated_identities: FederatedIdentityTable
  oidc_flows: OidcFlowTable
}

/** Anything queries can run on: the pool-backed instance or an open transaction. */
export type Executor = Kysely<Database> | Transaction<Database>
export type Tx = Transaction<Database>
