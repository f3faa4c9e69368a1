import type { Selectable } from 'kysely'
import type { Executor, FederatedIdentityTable, OidcFlowTable, Tx } from '../../db/schema.ts'

export type OidcFlowRow = Selectable<OidcFlowTable>
export type FederatedIdentityRow = Selectable<FederatedIdentityTable>

export async function insertFlow(db: Executor, values: Omit<OidcFlowRow, 'id'>): Promise<void> {
  await db.insertInto('oidc_flows').values(values).execute()
}

/** The live flow a cookie names, left in place. */
export function findFlow(
  db: Executor,
  handleHash: string,
  purpose: OidcFlowRow['purpose'],
  now: Date,
): Promise<OidcFlowRow | undefined> {
  return db
    .selectFrom('oidc_flows')
    .selectAll()
    .where('handle_hash', '=', handleHash)
    .where('purpose', '=', purpose)
    .where('expires_at', '>', now)
    .executeTakeFirst()
}

/**
 * Takes the flow a browser's cookie names, whatever its state: the row is deleted in the same
 * statement, so a flow is finished at most once even by parallel callbacks.
 */
export function takeFlow(
  db: Executor,
  handleHash: string,
  purposes: OidcFlowRow['purpose'][],
): Promise<OidcFlowRow | undefined> {
  return db
    .deleteFrom('oidc_flows')
    .where('handle_hash', '=', handleHash)
    .where('purpose', 'in', purposes)
    .returningAll()
    .executeTakeFirst()
}

export async function deleteExpiredFlows(db: Executor, now: Date, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('oidc_flows')
    .where('id', 'in', (eb) =>
      eb.selectFrom('oidc_flows').select('id').where('expires_at', '<', now).limit(limit),
    )
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}

export function findIdentity(
  db: Executor,
  issuer: string,
  subject: string,
): Promise<FederatedIdentityRow | undefined> {
  return db
    .selectFrom('federated_identities')
    .selectAll()
    .where('issuer', '=', issuer)
    .where('subject', '=', subject)
    .executeTakeFirst()
}

/** Inserts the identity unless (issuer, subject) is taken; returns the row that holds it. */
export async function insertIdentity(
  trx: Tx,
  values: Omit<FederatedIdentityRow, 'id' | 'last_used_at'>,
): Promise<{ row: FederatedIdentityRow; inserted: boolean }> {
  const inserted = await trx
    .insertInto('federated_identities')
    .values({ ...values, last_used_at: values.created_at })
    .onConflict((oc) => oc.columns(['issuer', 'subject']).doNothing())
    .returningAll()
    .executeTakeFirst()
  if (inserted) return { row: inserted, inserted: true }
  const held = (await findIdentity(trx, values.issuer, values.subject)) as FederatedIdentityRow
  return { row: held, inserted: false }
}

export async function touchIdentity(db: Executor, id: string, now: Date): Promise<void> {
  await db.updateTable('federated_identities').set({ last_used_at: now }).where('id', '=', id).execute()
}

export function listIdentities(db: Executor, organizationId: string, accountId: string) {
  return db
    .selectFrom('federated_identities')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where('account_id', '=', accountId)
    .orderBy('created_at')
    .orderBy('id')
    .execute()
}

export function deleteIdentity(
  trx: Tx,
  organizationId: string,
  accountId: string,
  id: string,
): Promise<FederatedIdentityRow | undefined> {
  return trx
    .deleteFrom('federated_identities')
    .where('organization_id', '=', organizationId)
    .where('account_id', '=', accountId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst()
}

/** A session of the account that is neither revoked nor expired. */
export function findLiveSession(db: Executor, accountId: string, sessionId: string, now: Date) {
  return db
    .selectFrom('sessions')
    .select(['id', 'created_at'])
    .where('id', '=', sessionId)
    .where('user_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', now)
    .executeTakeFirst()
}

/**
 * The account's ways to sign in, its row locked for the caller's transaction: whether its password
 * is usable, how many passkeys and linked identities it has.
 */
export async function countSignInWays(
  trx: Tx,
  accountId: string,
  unusablePrefix: string,
): Promise<{ password: boolean; passkeys: number; identities: number }> {
  const account = await trx
    .selectFrom('accounts')
    .select('password_hash')
    .where('id', '=', accountId)
    .forUpdate()
    .executeTakeFirstOrThrow()
  const passkeys = await trx
    .selectFrom('passkeys')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow()
  const identities = await trx
    .selectFrom('federated_identities')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow()
  return {
    password: !account.password_hash.startsWith(unusablePrefix),
    passkeys: Number(passkeys.count),
    identities: Number(identities.count),
  }
}
