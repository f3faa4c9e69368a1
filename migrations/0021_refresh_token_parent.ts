import { type Kysely, sql } from 'kysely'

// Each refresh token names the token it was issued for (`parent_id`; null for a session's first
// token), so that a rotated token presented again can be told apart: the parent of the session's
// live token, or an unused sibling of it (the refresh reuse grace), or anything older (reuse).
// No foreign key: tokens go with their session, parent and child alike.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table refresh_tokens add column parent_id uuid`.execute(db)
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table refresh_tokens drop column parent_id`.execute(db)
}
