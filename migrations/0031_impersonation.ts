import { type Kysely, sql } from 'kysely'

// Impersonation: a session an organization admin holds as one of the organization's members. It
// is the member's session (user_id) with the admin who holds it (`impersonator_id`), the admin's
// own session it was started from and returns to (`impersonator_session_id`), and the reason given.
// The admin's sessions are found by the partial index when the admin's access ends.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table sessions add column impersonator_id uuid`.execute(db)
  await sql`alter table sessions add column impersonator_session_id uuid`.execute(db)
  await sql`alter table sessions add column impersonation_reason text`.execute(db)
  await sql`create index sessions_impersonator_idx on sessions (impersonator_id) where impersonator_id is not null`.execute(
    db,
  )
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index sessions_impersonator_idx`.execute(db)
  await sql`alter table sessions drop column impersonation_reason`.execute(db)
  await sql`alter table sessions drop column impersonator_session_id`.execute(db)
  await sql`alter table sessions drop column impersonator_id`.execute(db)
}
