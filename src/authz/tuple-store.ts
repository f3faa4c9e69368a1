import { type AliasableExpression, type Insertable, type RawBuilder, sql } from 'kysely'
import type { AuthzOutboxTable, Executor } from '../db/schema.ts'

// The relationship tuples of the embedded authorization evaluator. Every lookup takes a list of
// object ids, so that the evaluator can answer many objects' questions with one query. Lists travel
// as one array parameter each (`= any($1::text[])`, `unnest`), never as one parameter per value, so
// that no list length reaches PostgreSQL's parameter limit; a lookup's list of one to SHORT_LIST
// values, the common case, goes as that many parameters instead (see oneOf).

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

/**
 * insertTuples and the rows that log them in the outbox, in one statement (a data-modifying CTE):
 * a resource's creation records its tuples with one round trip, not two.
 */
export async function insertTuplesLogged(
  db: Executor,
  tuples: readonly TupleRow[],
  log: readonly Insertable<AuthzOutboxTable>[],
): Promise<void> {
  await db
    .with('written', (w) =>
      w
        .insertInto('authz_tuples')
        .columns(['object_type', 'object_id', 'relation', 'subject_type', 'subject_id', 'subject_relation'])
        .expression(sql`select * from ${unnestTuples(tuples)}`)
        .onConflict((oc) => oc.doNothing()),
    )
    .insertInto('authz_outbox')
    .values([...log])
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
  const query = lookupsQuery(lookups)
  if (!query) return []
  const { rows } = await query.execute(db)
  return rows.map((row) => ({ ...row, lookup: Number(row.lookup) }))
}

/** The longest list a lookup sends as one parameter per value (see oneOf). */
const SHORT_LIST = 4

/**
 * `column` equal to one of `values`. A short list is written with one parameter per value
 * (`= $1`, `in ($1, $2)`), a longer one as an array parameter (`= any($1::text[])`). The statement
 * is prepared once per connection (src/db/database.ts), and PostgreSQL then plans it once
 * (a generic plan) only when that plan's estimate is close to the plans it makes for the values:
 * for an array parameter it assumes ten elements where a check sends one or two, so it planned
 * the statement again on every execution, which cost it more than running it.
 */
function oneOf(column: RawBuilder<unknown>, values: readonly string[]): RawBuilder<unknown> {
  if (values.length === 1) return sql`${column} = ${values[0]}`
  if (values.length <= SHORT_LIST) return sql`${column} in (${sql.join(values)})`
  return sql`${column} = any(${values}::text[])`
}

const LOOKUP_COLUMNS = sql`"object_id", "subject_type", "subject_id", "subject_relation"`
const NOT_PREFETCHED = sql`null::text as "prefetched_type", null::text as "prefetched_relation"`
const UNION_ALL = sql` union all `

/**
 * The statement of findTuplesForLookups; null when there is nothing to look up. Written with
 * Kysely's sql template rather than its select builder: building and compiling this union with the
 * builder on every check was a quarter of a check's CPU. Every value is a parameter (lists as one
 * text[] each); only the lookup's index, a number, is a literal.
 */
function lookupsQuery(lookups: readonly TupleLookup[]): RawBuilder<LookupRow> | null {
  const parts: RawBuilder<unknown>[] = []
  lookups.forEach((lookup, index) => {
    const tag = sql.lit(index)
    const onObjects = (alias: RawBuilder<unknown>) =>
      sql`${alias}"object_type" = ${lookup.objectType} and ${oneOf(sql`${alias}"object_id"`, lookup.objectIds)} and ${alias}"relation" = ${lookup.relation}`
    const tuplesOf = (condition: RawBuilder<unknown>) =>
      sql`select ${LOOKUP_COLUMNS}, ${tag} as "lookup", ${NOT_PREFETCHED} from "authz_tuples" where ${onObjects(NO_ALIAS)} and ${condition}`
    if (lookup.kind === 'parents') {
      parts.push(tuplesOf(sql`"subject_relation" = ${''}`))
      const subject = lookup.prefetchFor
      if (subject) {
        parts.push(
          sql`select "m"."object_id", "m"."subject_type", "m"."subject_id", "m"."subject_relation", ${tag} as "lookup", "m"."object_type" as "prefetched_type", "m"."relation" as "prefetched_relation" from "authz_tuples" as "p" inner join "authz_tuples" as "m" on "m"."object_type" = "p"."subject_type" and "m"."object_id" = "p"."subject_id" where ${onObjects(PARENT)} and "p"."subject_relation" = ${''} and "m"."subject_type" = ${subject.type} and ${oneOf(M_SUBJECT_ID, subject.ids)} and "m"."subject_relation" = ${subject.relation}`,
        )
      }
      return
    }
    const { subject } = lookup
    if (subject) {
      parts.push(
        tuplesOf(
          sql`"subject_type" = ${subject.type} and ${oneOf(SUBJECT_ID, subject.ids)} and "subject_relation" = ${subject.relation}`,
        ),
      )
    }
    if (lookup.usersets) parts.push(tuplesOf(sql`"subject_relation" <> ${''}`))
  })
  if (parts.length === 0) return null
  return sql<LookupRow>`${sql.join(
    parts.map((part) => sql`(${part})`),
    UNION_ALL,
  )}`
}

const NO_ALIAS = sql``
const PARENT = sql`"p".`
const SUBJECT_ID = sql`"subject_id"`
const M_SUBJECT_ID = sql`"m"."subject_id"`

/**
 * A read and the tuples of lookups, in one statement: the read's rows (numbered as they come out
 * of it) fully joined on false to the lookup rows, so that every row of either comes back once,
 * each lookup row as findTuplesForLookups would answer it and the read's rows in the read's order.
 * What a check's first round of lookups and the read of what it is about cost in one round trip
 * instead of two. The read is composed as a subquery, never as text; its columns must not start
 * with `authz_`.
 */
export async function findWithLookups<Row extends object>(
  db: Executor,
  read: RowsRead<Row>,
  lookups: readonly TupleLookup[],
): Promise<{ rows: Row[]; lookupRows: LookupRow[] }> {
  const tuples = lookupsQuery(lookups)
  if (!tuples) return { rows: await read.execute(), lookupRows: [] }
  const numbered = db
    .selectFrom(read.as('authz_read'))
    .selectAll('authz_read')
    .select(sql<string>`row_number() over ()`.as('authz_n'))
  const result = await db
    .selectFrom(numbered.as('r'))
    .fullJoin(sql<LookupRow>`(${tuples})`.as('l'), (join) => join.on(sql.lit(false)))
    .selectAll('r')
    .select([
      'l.object_id as authz_object_id',
      'l.subject_type as authz_subject_type',
      'l.subject_id as authz_subject_id',
      'l.subject_relation as authz_subject_relation',
      'l.lookup as authz_lookup',
      'l.prefetched_type as authz_prefetched_type',
      'l.prefetched_relation as authz_prefetched_relation',
    ])
    .orderBy('r.authz_n')
    .execute()
  const rows: Row[] = []
  const lookupRows: LookupRow[] = []
  for (const r of result as Record<string, unknown>[]) {
    if (r.authz_n !== null && r.authz_n !== undefined) {
      const fields: Record<string, unknown> = {}
      for (const name in r) if (!name.startsWith('authz_')) fields[name] = r[name]
      rows.push(fields as Row)
    } else if (r.authz_lookup !== null && r.authz_lookup !== undefined) {
      lookupRows.push({
        object_id: r.authz_object_id as string,
        subject_type: r.authz_subject_type as string,
        subject_id: r.authz_subject_id as string,
        subject_relation: r.authz_subject_relation as string,
        lookup: Number(r.authz_lookup),
        prefetched_type: r.authz_prefetched_type as string | null,
        prefetched_relation: r.authz_prefetched_relation as string | null,
      })
    }
  }
  return { rows, lookupRows }
}

/**
 * A feature's select (a Kysely select builder): run alone, or composed as a subquery into the
 * statement of a check's lookups (findWithLookups).
 */
export type RowsRead<Row> = AliasableExpression<Row> & { execute(): Promise<Row[]> }
