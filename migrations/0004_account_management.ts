import { type Kysely, sql } from 'kysely'

// One-time tokens (invitation, password reset), OTP backup codes, and the devices an account has
// signed in from (for the opt-in new-device notice). Tokens and codes are stored as SHA-256 only.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('one_time_tokens')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (col) => col.notNull().references('accounts.id'))
    .addColumn('purpose', 'text', (col) =>
      col.notNull().check(sql`purpose in ('INVITATION', 'PASSWORD_RESET')`),
    )
    .addColumn('token_hash', 'text', (col) => col.notNull().unique())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('expires_at', 'timestamptz', (col) => col.notNull())
    .addColumn('used_at', 'timestamptz')
    .execute()
  await db.schema
    .createIndex('one_time_tokens_account_idx')
    .on('one_time_tokens')
    .column('account_id')
    .execute()

  await db.schema
    .createTable('otp_backup_codes')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (col) => col.notNull().references('accounts.id'))
    .addColumn('code_hash', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('used_at', 'timestamptz')
    .execute()
  await db.schema
    .createIndex('otp_backup_codes_account_idx')
    .on('otp_backup_codes')
    .columns(['account_id', 'code_hash'])
    .execute()

  await db.schema
    .createTable('known_devices')
    .addColumn('account_id', 'uuid', (col) => col.notNull().references('accounts.id'))
    .addColumn('device_hash', 'text', (col) => col.notNull())
    .addColumn('first_seen_at', 'timestamptz', (col) => col.notNull())
    .addColumn('last_seen_at', 'timestamptz', (col) => col.notNull())
    .addPrimaryKeyConstraint('known_devices_pkey', ['account_id', 'device_hash'])
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('known_devices').execute()
  await db.schema.dropTable('otp_backup_codes').execute()
  await db.schema.dropTable('one_time_tokens').execute()
}
