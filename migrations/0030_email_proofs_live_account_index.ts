import { type Kysely, sql } from 'kysely'

// A new proof retires the live proofs of its address or of its account. The account's side used the
// plain account index, which holds every proof the account ever had (used ones until retention
// deletes them), so an account's requests slowed as its used proofs grew; the live ones alone are
// what the retirement reads.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index email_proofs_live_account_idx on email_proofs (account_id) where used_at is null`.execute(
    db,
  )
}

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index email_proofs_live_account_idx`.execute(db)
}
