import type { Selectable } from 'kysely'
import type { Executor, FederatedIdentityTable, OidcFlowTable, Tx } from '../../db/schema.ts'

export type OidcFlowRow = Selectable<OidcFlowTable>
export type FederatedIdentityRow = Selectable<FederatedIdentityTable>

export async function insertFlow(db: Executor, values: Omit<OidcFlowRow, 'id'>): Promise<void> {
  await db.insertInto('oidc_flows').values(values).execute()
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
): Promise<FederatedIdentityRow> {
  const inserted = await trx
    .insertInto('federated_identities')
    .values({ ...values, last_used_at: values.created_at })
    .onConflict((oc) => oc.columns(['issuer', 'subject']).doNothing())
    .returningAll()
    .executeTakeFirst()
  if (inserted) return inserted
  return (await findIdentity(trx, values.issuer, values.subject)) as FederatedIdentityRow
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
