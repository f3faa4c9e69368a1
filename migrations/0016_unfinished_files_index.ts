import { type Kysely, sql } from 'kysely'

// The `files` retention rule looks for uploads that were never confirmed (PENDING, or REJECTED as
// too large) older than a cutoff. Confirmed files are the bulk of the table and never match, so a
// partial index keeps that scan proportional to the unfinished uploads alone.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createIndex('files_unfinished_idx')
    .on('files')
    .column('created_at')
    .where(sql.ref('status'), '<>', 'CONFIRMED')
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('files_unfinished_idx').execute()
}
