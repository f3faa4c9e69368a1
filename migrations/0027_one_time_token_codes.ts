import type { Kysely } from 'kysely'

// Invitation and password-reset mails carry a six-digit code beside their link, as every mailed
// proof does: the code is stored hashed (salted with the link's token hash), and `attempts` counts
// wrong codes until the configured maximum ends the token. Tokens issued before this migration have
// no code and keep working by their link alone.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('one_time_tokens')
    .addColumn('code_hash', 'text')
    .addColumn('attempts', 'integer', (col) => col.notNull().defaultTo(0))
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('one_time_tokens').dropColumn('attempts').dropColumn('code_hash').execute()
}
