import type { Executor, Tx } from '../../db/schema.ts'

export async function storeOtpSecret(
  db: Executor,
  accountId: string,
  encryptedSecret: string,
  now: Date,
): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ otp_secret: encryptedSecret, otp_enabled: false, otp_last_step: null, updated_at: now })
    .where('id', '=', accountId)
    .execute()
}

/** Records an accepted TOTP step unless it (or a later one) was already used: no replay. */
export async function claimOtpStep(db: Executor, accountId: string, step: number): Promise<boolean> {
  const row = await db
    .updateTable('accounts')
    .set({ otp_last_step: String(step) })
    .where('id', '=', accountId)
    .where((eb) => eb.or([eb('otp_last_step', 'is', null), eb('otp_last_step', '<', String(step))]))
    .returning('id')
    .executeTakeFirst()
  return row !== undefined
}

export async function setOtpEnabled(trx: Tx, accountId: string, enabled: boolean, now: Date): Promise<void> {
  await trx
    .updateTable('accounts')
    .set(
      enabled
        ? { otp_enabled: true, updated_at: now }
        : { otp_enabled: false, otp_secret: null, otp_last_step: null, updated_at: now },
    )
    .where('id', '=', accountId)
    .execute()
}

export async function replaceBackupCodes(
  trx: Tx,
  accountId: string,
  codeHashes: string[],
  now: Date,
): Promise<void> {
  await trx.deleteFrom('otp_backup_codes').where('account_id', '=', accountId).execute()
  if (codeHashes.length === 0) return
  await trx
    .insertInto('otp_backup_codes')
    .values(codeHashes.map((code_hash) => ({ account_id: accountId, code_hash, created_at: now })))
    .execute()
}

/**
 * Uses a backup code atomically, found by its keyed hash through the (account_id, code_hash) index;
 * true when it existed and was unused. One UPDATE … WHERE used_at IS NULL: of concurrent uses of one
 * code, the row lock lets exactly one through.
 */
export async function consumeBackupCode(
  db: Executor,
  accountId: string,
  codeHashes: string[],
  now: Date,
): Promise<boolean> {
  const row = await db
    .updateTable('otp_backup_codes')
    .set({ used_at: now })
    .where('account_id', '=', accountId)
    .where('code_hash', 'in', codeHashes)
    .where('used_at', 'is', null)
    .returning('id')
    .executeTakeFirst()
  return row !== undefined
}
