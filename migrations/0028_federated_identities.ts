import { type Kysely, sql } from 'kysely'

// Sign-in through OpenID Connect providers.
// `federated_identities`: an account's identity at a provider, keyed by (issuer, subject), never by
// email. `provider_ref` names what the identity came through (a deployment-wide provider,
// `platform:<id>`, or another kind such as an organization's connection, `connection:<id>`);
// `connection_id` is that connection's id when there is one (its table comes later, hence no
// foreign key here).
// `oidc_flows`: one row per authorization request in flight (state, nonce, PKCE verifier, what it
// is for), found by the hash of the httpOnly cookie that binds it to the browser, deleted when
// used; and the short wait for a second factor after a provider sign-in (purpose `second_factor`).

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('federated_identities')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('organization_id', 'uuid', (col) =>
      col.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('account_id', 'uuid', (col) => col.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('issuer', 'text', (col) => col.notNull())
    .addColumn('subject', 'text', (col) => col.notNull())
    .addColumn('provider_ref', 'text', (col) => col.notNull())
    .addColumn('connection_id', 'uuid')
    .addColumn('email', 'text')
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('last_used_at', 'timestamptz')
    .addUniqueConstraint('federated_identities_issuer_subject_key', ['issuer', 'subject'])
    .execute()
  await db.schema
    .createIndex('federated_identities_account_idx')
    .on('federated_identities')
    .columns(['organization_id', 'account_id'])
    .execute()
  await db.schema
    .createIndex('federated_identities_connection_idx')
    .on('federated_identities')
    .column('connection_id')
    .where(sql.ref('connection_id'), 'is not', null)
    .execute()

  await db.schema
    .createTable('oidc_flows')
    .addColumn('id', 'uuid', (col) => col.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('handle_hash', 'text', (col) => col.notNull().unique())
    .addColumn('purpose', 'text', (col) =>
      col.notNull().check(sql`purpose in ('sign_in', 'link', 'second_factor')`),
    )
    .addColumn('provider_ref', 'text', (col) => col.notNull())
    .addColumn('state', 'text')
    .addColumn('nonce', 'text')
    .addColumn('code_verifier', 'text')
    .addColumn('account_id', 'uuid', (col) => col.references('accounts.id').onDelete('cascade'))
    .addColumn('session_id', 'uuid', (col) => col.references('sessions.id').onDelete('cascade'))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull())
    .addColumn('expires_at', 'timestamptz', (col) => col.notNull())
    .execute()
  await db.schema.createIndex('oidc_flows_expires_idx').on('oidc_flows').column('expires_at').execute()
}

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('oidc_flows').execute()
  await db.schema.dropTable('federated_identities').execute()
}
