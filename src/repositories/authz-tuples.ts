import { type RawBuilder, sql } from 'kysely'
import type { Executor } from '../db/schema.ts'

// The relationship tuples of the embedded authorization evaluator. Every lookup takes a list of
// object ids, so that the evaluator can answer many objects' questions with one query. Lists travel
// as one array parameter each (`= any($1::text[])`, `unnest`), never as one parameter per value, so
// that no list length reaches PostgreSQL's parameter limit.

export interface TupleRow {
  object_type: string
  object_id: string
  relation: string
  subject_type: string
  subject_id: string
  /** '' unless the subject is a userset (`organization:1#member`). */
  subject_relation: string
}

export type SubjectRow = Pick<TupleRow, 'object_id' | 'subject_type' | 'subject_id' | 'subject_relation'>

function anyOf(values: readonly string[]): RawBuilder<string> {
  return sql<string>`any(${values}::text[])`
}

function column(tuples: readonly TupleRow[], name: keyof TupleRow): RawBuilder<string[]> {
  return sql<string[]>`${tuples.map((t) => t[name])}::text[]`
}

function unnestTuples(tuples: readonly TupleRow[]) {
  return sql`unnest(${column(tuples, 'object_type')}, ${column(tuples, 'object_id')}, ${column(tuples, 'relation')}, ${column(tuples, 'subject_type')}, ${column(tuples, 'subject_id')}, ${column(tuples, 'subject_relation')})`
}

/** Inserts the tuples; existing ones (and repeats within the list) are left as they are. */
export async function insertTuples(db: Executor, tuples: readonly TupleRow[]): Promise<void> {
  if (tuples.length === 0) return
  await db
    .insertInto('authz_tuples')
    .columns(['object_type', 'object_id', 'relation', 'subject_type', 'subject_id', 'subject_relation'])
    .expression(sql`select * from ${unnestTuples(tuples)}`)
    .onConflict((oc) => oc.doNothing())
    .execute()
}

/** Deletes the tuples; missing ones are no error. */
export async function deleteTuples(db: Executor, tuples: readonly TupleRow[]): Promise<void> {
  if (tuples.length === 0) return
  await sql`
    delete from authz_tuples as a
    using ${unnestTuples(tuples)} as d(object_type, object_id, relation, subject_type, subject_id, subject_relation)
    where a.object_type = d.object_type and a.object_id = d.object_id and a.relation = d.relation
      and a.subject_type = d.subject_type and a.subject_id = d.subject_id and a.subject_relation = d.subject_relation
  `.execute(db)
}

export interface DirectSubjectsQuery {
  kind: 'direct'
  objectType: string
  relation: string
  objectIds: readonly string[]
  subject: { type: string; ids: readonly string[]; relation: string } | null
  usersets: boolean
}

export interface ObjectSubjectsQuery {
  kind: 'parents'
  objectType: string
  relation: string
  objectIds: readonly string[]
  /**
   * Also fetch, in the same statement, every tuple on the parents that names this subject (any
   * relation; its forms: its id and/or '*', its userset relation or ''), answering the direct
   * lookups the walk makes next on those parents.
   */
  prefetchFor?: { type: string; ids: readonly string[]; relation: string }
}

/** A row of a lookup; rows prefetched on a parent carry the parent's type and the tuple's relation. */
export interface LookupRow extends SubjectRow {
  lookup: number
  prefetched_type: string | null
  prefetched_relation: string | null
}

export type TupleLookup = DirectSubjectsQuery | ObjectSubjectsQuery

/**
 * The tuples several lookups ask for, in one statement, each row tagged with the index of the
 * lookup it answers:
 * - `direct`: the direct subjects of `objectType:<id>#relation` for each id that matter to one
 *   user: the tuples naming the user (`subject`: its type, its id and/or '*', its userset relation
 *   or ''), and, when `usersets` is set, every userset tuple (which the caller follows);
 * - `parents`: the object subjects (no usersets) of `objectType:<id>#relation` for each id, a
 *   tuple-to-userset's parents.
 * Each part is an index scan; a round of a check's lookups costs one round trip.
 */
export async function findTuplesForLookups(
  db: Executor,
  lookups: readonly TupleLookup[],
): Promise<LookupRow[]> {
  const parts = lookups.flatMap((lookup, index) => {
    const tuplesOf = () =>
      db
        .selectFrom('authz_tuples')
        .select(['object_id', 'subject_type', 'subject_id', 'subject_relation'])
        .select([
          sql.lit(index).as('lookup'),
          sql<string | null>`null::text`.as('prefetched_type'),
          sql<string | null>`null::text`.as('prefetched_relation'),
        ])
        .where('object_type', '=', lookup.objectType)
        .where('object_id', '=', anyOf(lookup.objectIds))
        .where('relation', '=', lookup.relation)
    if (lookup.kind === 'parents') {
      const parents = tuplesOf().where('subject_relation', '=', '')
      const subject = lookup.prefetchFor
      if (!subject) return [parents]
      const onParents = db
        .selectFrom('authz_tuples as p')
        .innerJoin('authz_tuples as m', (join) =>
          join.onRef('m.object_type', '=', 'p.subject_type').onRef('m.object_id', '=', 'p.subject_id'),
        )
        .select(['m.object_id', 'm.subject_type', 'm.subject_id', 'm.subject_relation'])
        .select([
          sql.lit(index).as('lookup'),
          sql<string | null>`m.object_type`.as('prefetched_type'),
          sql<string | null>`m.relation`.as('prefetched_relation'),
        ])
        .where('p.object_type', '=', lookup.objectType)
        .where('p.object_id', '=', anyOf(lookup.objectIds))
        .where('p.relation', '=', lookup.relation)
        .where('p.subject_relation', '=', '')
        .where('m.subject_type', '=', subject.type)
        .where('m.subject_id', '=', anyOf(subject.ids))
        .where('m.subject_relation', '=', subject.relation)
      return [parents, onParents]
    }
    const { subject } = lookup
    return [
      ...(subject
        ? [
            tuplesOf()
              .where('subject_type', '=', subject.type)
              .where('subject_id', '=', anyOf(subject.ids))
              .where('subject_relation', '=', subject.relation),
          ]
        : []),
      ...(lookup.usersets ? [tuplesOf().where('subject_relation', '<>', '')] : []),
    ]
  })
  if (parts.length === 0) return []
  const { rows } = await sql<LookupRow>`${sql.join(
    parts.map((part) => sql`(${part})`),
    sql` union all `,
  )}`.execute(db)
  return rows.map((row) => ({ ...row, lookup: Number(row.lookup) }))
}
