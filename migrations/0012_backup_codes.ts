import type { Kysely } from 'kysely'

// OTP backup codes were 10 symbols (about 49 bits) stored as unsalted SHA-256: a copy of the table
// gave them all away in hours of hashing. They are now 25 base32 symbols (125 bits) stored as
// HMAC-SHA256 under a key derived from the JWT secret (src/services/otp.ts). The old codes cannot be
// converted (only their weak hashes are known) and the new service no longer accepts their form, so
// their rows are removed rather than left as weak hashes. Authenticator codes are unaffected; a
// member who wants backup codes again disables and re-enables OTP.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.deleteFrom('otp_backup_codes').execute()
}

/** Nothing to restore: the removed codes were unusable under the new scheme. */
export async function down(): Promise<void> {}
