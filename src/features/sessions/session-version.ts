import type { Kysely } from 'kysely'
import { inTransaction } from '../../db/database.ts'
import type { Database } from '../../db/schema.ts'
import type { EventListener } from '../../events.ts'
import { publishRevocation } from '../../security/revocation.ts'
import { findSessionVersion, incrementSessionVersion } from '../accounts/index.ts'

/**
 * Extension point: the current session version of a user. When a provider returns a
 * version, access tokens carrying another `ver` are rejected before they expire. Returning null
 * means "not enforced" for that user.
 */
export interface SessionVersionProvider {
  currentVersion(userId: string): Promise<number | null>
}

/** The built-in provider (off by default): a counter on the account row. */
export function accountSessionVersions(db: Kysely<Database>): SessionVersionProvider {
  return {
    currentVersion: async (userId) => (await findSessionVersion(db, userId)) ?? null,
  }
}

/**
 * The built-in provider's answer to a user's sessions ended: the account's counter goes up, so
 * access tokens with the old `ver` are refused at once, and every instance drops what it cached of
 * the user (src/security/revocation.ts).
 */
export function bumpSessionVersion(db: Kysely<Database>): EventListener<'UserSessionsRevokedEvent'> {
  return ({ userId }) =>
    inTransaction(db, async (trx) => {
      await incrementSessionVersion(trx, userId)
      await publishRevocation(trx, { kind: 'user', id: userId })
    })
}
