import type { Kysely } from 'kysely'
import type { Database } from '../../db/schema.ts'
import { findSessionVersion } from '../accounts/index.ts'

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
