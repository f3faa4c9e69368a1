import { type Kysely, sql } from 'kysely'

// Relationship tuples of the embedded authorization evaluator (decisions 3: used when no OpenFGA
// server is configured). A subject is an object (`user:1`, `organization:2`), a wildcard
// (`user:*`, subject_id '*') or a userset (`organization:2#member`, subject_relation 'member';
// '' otherwise, so that the primary key can cover it).
//
// Lookups: the primary key leads with (object_type, object_id, relation), which serves the
// evaluator's "tuples of object#relation" and its "is this subject directly related" probes; the
// partial index finds the userset tuples of object#relation without scanning every direct user of
// a large group; the subject index serves listObjects' walk from a user to the objects it reaches.

// biome-ignore lint/suspicious/noExplicitAny: migrations are frozen in time and do not use the app's types
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('authz_tuples')
    .addColumn('object_type', 'text', (col) => col.notNull())
    .addColumn('object_id', 'text', (col) => col.notNull())
    .addColumn('relation', 'text', (col) => col.notNull())
    .addColumn('subject_type', 'text', (col) => col.notNull())
    .addColumn('subject_id', 'text', (col) => col.notNull())
    .addColumn('subject_relation', 'text', (col) => col.notNull().defaultTo(''))
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('authz_tuples_pkey', [
      'object_type',
      'object_id',
      'relation',
      'subject_type',
      'subject_id',
      'subject_relation',
    ])
    .execute()
  await sql`create index authz_tuples_usersets_idx on authz_tuples (object_type, object_id, relation) where subject_relation <> ''`.execute(
    db,
  )
  await db.schema
    .createIndex('authz_tuples_subject_idx')
    .on('authz_tuples')
    .columns(['subject_type', 'subject_id', 'object_type', 'object_id'])
    .execute()
}

// biome-ignore lint/suspicious/noExplicitAny: see up()
export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('authz_tuples').execute()
}
