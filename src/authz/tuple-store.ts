import { CompiledQuery, type Insertable, type RawBuilder, sql } from 'kysely'
import type { AuthzOutboxTable, Executor } from '../db/schema.ts'

// The relationship tuples of the embedded authorization evaluator. Every lookup takes a list of
// object ids, so that the evaluator can answer many objects' questions with one query. Lists travel
// as one array parameter each (`= any($1::text[])`, `unnest`), never as one parameter per value, so
// that no list length reaches PostgreSQL's parameter limit; a lookup's list of one to SHORT_LIST
// values, the common case, goes as that many parameters instead (see lookupsText).

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
  const parameters: unknown[] = []
  const text = lookupsText(lookups, parameters)
  if (text === null) return []
  const { rows } = await db.executeQuery<LookupRow>(CompiledQuery.raw(text, parameters))
  for (const row of rows) row.lookup = Number(row.lookup)
  return rows as LookupRow[]
}

/** The longest list a lookup sends as one parameter per value (see lookupsText). */
const SHORT_LIST = 4

const LOOKUP_COLUMNS = '"object_id", "subject_type", "subject_id", "subject_relation"'
const NOT_PREFETCHED = 'null::text as "prefetched_type", null::text as "prefetched_relation"'

/**
 * The statement of findTuplesForLookups, its values appended to `parameters` (placeholders
 * numbered after those already there); null when there is nothing to look up. Written as text: the
 * same text comes back for the same shape of lookups, which the pool's clients prepare once per
 * connection (src/db/database.ts), and building it costs a few concatenations where compiling it
 * with Kysely (its builder or its sql template) was a large part of a check's CPU. Every value is a
 * parameter; only the lookup's index, a number, is a literal.
 *
 * A list of one to SHORT_LIST values is written with one parameter per value (`= $1`,
 * `in ($1, $2)`), a longer one as an array parameter (`= any($1::text[])`): PostgreSQL keeps one
 * (generic) plan of a prepared statement only when its estimate is close to the plans it makes for
 * the values, and for an array parameter it assumes ten elements where a check sends one or two,
 * so it planned the statement again on every execution, which cost it more than running it.
 */
function lookupsText(lookups: readonly TupleLookup[], parameters: unknown[]): string | null {
  const parameter = (value: unknown) => {
    parameters.push(value)
    return `$${parameters.length}`
  }
  const oneOf = (column: string, values: readonly string[]) => {
    if (values.length === 1) return `${column} = ${parameter(values[0])}`
    if (values.length <= SHORT_LIST) return `${column} in (${values.map(parameter).join(', ')})`
    return `${column} = any(${parameter(values)}::text[])`
  }
  const onObjects = (alias: string, lookup: TupleLookup) =>
    `${alias}"object_type" = ${parameter(lookup.objectType)} and ${oneOf(`${alias}"object_id"`, lookup.objectIds)} and ${alias}"relation" = ${parameter(lookup.relation)}`
  let text = ''
  const add = (part: string) => {
    text += text === '' ? `(${part})` : ` union all (${part})`
  }
  lookups.forEach((lookup, index) => {
    const tuplesOf = `select ${LOOKUP_COLUMNS}, ${index} as "lookup", ${NOT_PREFETCHED} from "authz_tuples" where `
    if (lookup.kind === 'parents') {
      add(`${tuplesOf}${onObjects('', lookup)} and "subject_relation" = ${parameter('')}`)
      const subject = lookup.prefetchFor
      if (subject) {
        add(
          `select "m"."object_id", "m"."subject_type", "m"."subject_id", "m"."subject_relation", ${index} as "lookup", "m"."object_type" as "prefetched_type", "m"."relation" as "prefetched_relation" from "authz_tuples" as "p" inner join "authz_tuples" as "m" on "m"."object_type" = "p"."subject_type" and "m"."object_id" = "p"."subject_id" where ${onObjects('"p".', lookup)} and "p"."subject_relation" = ${parameter('')} and "m"."subject_type" = ${parameter(subject.type)} and ${oneOf('"m"."subject_id"', subject.ids)} and "m"."subject_relation" = ${parameter(subject.relation)}`,
        )
      }
      return
    }
    const { subject } = lookup
    if (subject) {
      add(
        `${tuplesOf}${onObjects('', lookup)} and "subject_type" = ${parameter(subject.type)} and ${oneOf('"subject_id"', subject.ids)} and "subject_relation" = ${parameter(subject.relation)}`,
      )
    }
    if (lookup.usersets) add(`${tuplesOf}${onObjects('', lookup)} and "subject_relation" <> ${parameter('')}`)
  })
  return text === '' ? null : text
}

/**
 * A read and the tuples of lookups, in one statement: the read's rows (numbered as they come out
 * of it) fully joined on false to the lookup rows, so that every row of either comes back once,
 * each lookup row as findTuplesForLookups would answer it and the read's rows in the read's order.
 * What a check's first round of lookups and the read of what it is about cost in one round trip
 * instead of two. The read is composed as a subquery (its compiled text and parameters, the
 * lookups' placeholders numbered after its own), never from values; its columns must not start
 * with `authz_`.
 */
export async function findWithLookups<Row extends object>(
  db: Executor,
  read: RowsRead<Row>,
  lookups: readonly TupleLookup[],
): Promise<{ rows: Row[]; lookupRows: LookupRow[] }> {
  const compiled = read.compile()
  const parameters = [...compiled.parameters]
  const tuples = lookupsText(lookups, parameters)
  if (tuples === null) return { rows: await read.execute(), lookupRows: [] }
  const text = `select "r".*, "l"."object_id" as "authz_object_id", "l"."subject_type" as "authz_subject_type", "l"."subject_id" as "authz_subject_id", "l"."subject_relation" as "authz_subject_relation", "l"."lookup" as "authz_lookup", "l"."prefetched_type" as "authz_prefetched_type", "l"."prefetched_relation" as "authz_prefetched_relation" from (select "authz_read".*, row_number() over () as "authz_n" from (${compiled.sql}) as "authz_read") as "r" full join (${tuples}) as "l" on false order by "r"."authz_n"`
  const result = await db.executeQuery(CompiledQuery.raw(text, parameters))
  const rows: Row[] = []
  const lookupRows: LookupRow[] = []
  for (const r of result.rows as Record<string, unknown>[]) {
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
export type RowsRead<Row> = { execute(): Promise<Row[]>; compile(): CompiledQuery<Row> }
