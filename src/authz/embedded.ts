import { type Kysely, sql } from 'kysely'
import { inTransaction, isDataException } from '../db/database.ts'
import type { Database } from '../db/schema.ts'
import type { ModelIndex, RelationReference, Userset } from './model.ts'
import {
  type AuthorizationPort,
  AuthorizationRequestError,
  AuthorizationUnavailableError,
  type CheckRequest,
  type TupleKey,
} from './port.ts'
import {
  deleteTuples,
  findTuplesForLookups,
  findWithLookups,
  insertTuples,
  insertTuplesLogged,
  type LookupRow,
  type RowsRead,
  type SubjectRow,
  type TupleLookup,
  type TupleRow,
} from './tuple-store.ts'
import { enqueueTupleChanges, outboxRowsOf, type TupleRecorder } from './tuples.ts'

// The embedded authorization evaluator: OpenFGA's check semantics for a schema 1.1
// model, over the tuples in `authz_tuples`. What it evaluates: direct relations restricted to the
// types the model names (`[user, api_key]`, usersets `[group#member]`, wildcards `[user:*]`),
// computed usersets, tuple-to-userset, union, intersection and exclusion. What it does not: conditions
// (ABAC, `[user with c]`); a model that uses them is refused when the evaluator is built.
//
// Queries: a check walks the rewrite of object#relation. Each direct lookup asks only for the tuples
// that can matter to the user (the user itself, its type's wildcard, and the userset tuples to
// follow), each tuple-to-userset lookup for the parent objects; every lookup of one (object,
// relation) is made once per check, and lookups asked in the same tick are merged into one query
// per (type, relation). Unions stop at the first allow, intersections at the first deny,
// exclusions skip the subtraction when the base denies.
//
// Depth and cycles, as OpenFGA: a check that follows more than 25 nested usersets and parents (a
// computed userset does not count) fails (OpenFGA answers `authorization_model_resolution_too_complex`;
// here ResolutionDepthExceededError, an AuthorizationUnavailableError as the OpenFGA adapter maps it:
// the caller fails closed). A branch that comes back to an object#relation still being resolved
// (group:a ∋ group:b#member ∋ group:a#member, or a parent loop) is a cycle: it answers false and the
// rest of the check goes on. A false that depends on such a cut is not memoised beyond the cycle's
// own resolution. As in OpenFGA's general resolution, a false that met a cycle anywhere carries it up
// to the check's answer ("cycle detected"), and an exclusion whose subtraction met one denies: the
// cycle leaves the subtraction undecided, even once it is closed inside it. Where OpenFGA takes its
// recursive fast path instead (ModelIndex.recursiveFastPath), a false carries no cycle. And a relation
// the user's type has no path to in the model is false without a lookup (OpenFGA's PathExists).

/** OpenFGA's default resolution depth (OPENFGA_RESOLVE_NODE_LIMIT). */
export const MAX_RESOLUTION_DEPTH = 25

const NAME = /^[^\s:#@*]+$/
const OBJECT_ID = /^[^\s#]+$/
const MAX_OBJECT_LENGTH = 256

export class ResolutionDepthExceededError extends AuthorizationUnavailableError {
  constructor() {
    super(
      `authorization resolution too complex: more than ${MAX_RESOLUTION_DEPTH} nested usersets and parents`,
    )
    this.name = 'ResolutionDepthExceededError'
  }
}

/**
 * The model uses what this evaluator does not evaluate: refused at start-up rather
 * than answered wrongly.
 */
export class UnsupportedModelError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'UnsupportedModelError'
  }
}

/**
 * Conditions (`[user with c]`, `condition c(...) {...}`) are not evaluated yet. Accepting such a
 * model would ignore them and allow what OpenFGA denies (150 of the 396 checks of OpenFGA's own ABAC
 * tests), so it is refused, naming each condition and where it is used.
 */
function refuseUnsupported(model: ModelIndex): void {
  const conditions = model.conditions()
  if (conditions.length === 0) return
  const named = conditions
    .map(({ name, usedBy }) => (usedBy.length > 0 ? `${name} (used by ${usedBy.join(', ')})` : name))
    .join('; ')
  throw new UnsupportedModelError(
    `the authorization model uses conditions, which the embedded authorization evaluator does not evaluate: ${named}. Remove them from the model or configure an OpenFGA server (platform.authz.openfga.api-url)`,
  )
}

interface ObjectRef {
  type: string
  id: string
}

/** A check's or a tuple's user: an object, a wildcard (id '*') or a userset (relation not ''). */
interface Subject extends ObjectRef {
  relation: string
}

/**
 * An answer, the lowest path position of a cycle cut it depends on that is still open (Infinity:
 * none), and whether a false met a cycle at all, closed or not.
 */
interface Outcome {
  allowed: boolean
  cycleAt: number
  cycle: boolean
}

const ALLOWED: Outcome = { allowed: true, cycleAt: Number.POSITIVE_INFINITY, cycle: false }
const DENIED: Outcome = { allowed: false, cycleAt: Number.POSITIVE_INFINITY, cycle: false }

const quote = (value: unknown) => JSON.stringify(value)

function parseObject(value: unknown, what: string): ObjectRef {
  const text = typeof value === 'string' ? value : ''
  const colon = text.indexOf(':')
  const type = text.slice(0, colon)
  const id = text.slice(colon + 1)
  if (colon < 1 || text.length > MAX_OBJECT_LENGTH || !NAME.test(type) || !OBJECT_ID.test(id)) {
    throw new AuthorizationRequestError(`invalid ${what} ${quote(value)}: expected type:id`)
  }
  return { type, id }
}

function parseTarget(value: unknown): ObjectRef {
  const object = parseObject(value, 'object')
  if (object.id === '*')
    throw new AuthorizationRequestError(`invalid object ${quote(value)}: an object is not a wildcard`)
  return object
}

function parseSubject(value: unknown): Subject {
  const text = typeof value === 'string' ? value : ''
  const hash = text.indexOf('#')
  if (hash === -1) return { ...parseObject(value, 'user'), relation: '' }
  const object = parseObject(text.slice(0, hash), 'user')
  const relation = text.slice(hash + 1)
  if (!NAME.test(relation) || object.id === '*') {
    throw new AuthorizationRequestError(
      `invalid user ${quote(value)}: expected type:id, type:* or type:id#relation`,
    )
  }
  return { ...object, relation }
}

function parseName(value: unknown, what: string): string {
  if (typeof value !== 'string' || !NAME.test(value)) {
    throw new AuthorizationRequestError(`invalid ${what} ${quote(value)}`)
  }
  return value
}

/** Whether a type restriction names the subject's form: its type, userset relation or wildcard. */
function matchesType(ref: RelationReference, subject: Subject): boolean {
  if (ref.type !== subject.type) return false
  if (subject.relation) return ref.relation === subject.relation
  if (subject.id === '*') return ref.wildcard !== undefined
  return !ref.relation && ref.wildcard === undefined
}

/**
 * Whether the model lets `subject` be related directly through these types by a tuple without a
 * condition (the only kind stored here): `[user with c]` admits none, as OpenFGA, which refuses such
 * a write and ignores such a stored tuple when it reads.
 */
function admits(types: RelationReference[], subject: Subject): boolean {
  return types.some((ref) => !ref.condition && matchesType(ref, subject))
}

function describeTypes(types: RelationReference[]): string {
  if (types.length === 0) return 'no directly related user types'
  return types
    .map(
      (ref) =>
        `${ref.type}${ref.wildcard ? ':*' : ''}${ref.relation ? `#${ref.relation}` : ''}${ref.condition ? ` with ${ref.condition}` : ''}`,
    )
    .join(', ')
}

const isDepthExceeded = (error: unknown) => error instanceof ResolutionDepthExceededError

/**
 * The branches of a rewrite, evaluated together so that their lookups share a round trip; each gets
 * its own copy of the resolution path (they are separate descents, not one).
 */
function together(
  branches: Array<(path: Map<string, number>) => Promise<Outcome>>,
  path: Map<string, number>,
): Array<() => Promise<Outcome>> {
  const started = branches.map((branch) => branch(new Map(path)))
  // Settled here so that a branch failing before the others are awaited is not an unhandled rejection.
  for (const promise of started) promise.catch(() => undefined)
  return started.map((promise) => () => promise)
}

/** Union: allowed as soon as one branch allows; a depth error only counts when nothing allows. */
async function anyOf(branches: Array<() => Promise<Outcome>>): Promise<Outcome> {
  let cycleAt = Number.POSITIVE_INFINITY
  let cycle = false
  let failure: unknown
  for (const branch of branches) {
    try {
      const outcome = await branch()
      if (outcome.allowed) return ALLOWED
      cycleAt = Math.min(cycleAt, outcome.cycleAt)
      cycle ||= outcome.cycle
    } catch (error) {
      if (!isDepthExceeded(error)) throw error
      failure ??= error
    }
  }
  if (failure) throw failure
  return { allowed: false, cycleAt, cycle }
}

/** Intersection: denied as soon as one branch denies; a depth error only counts when nothing denies. */
async function allOf(branches: Array<() => Promise<Outcome>>): Promise<Outcome> {
  let failure: unknown
  for (const branch of branches) {
    try {
      const outcome = await branch()
      if (!outcome.allowed) return outcome
    } catch (error) {
      if (!isDepthExceeded(error)) throw error
      failure ??= error
    }
  }
  if (failure) throw failure
  return ALLOWED
}

/** Exclusion: the subtraction is only evaluated when the base allows (or could not be resolved). */
async function butNot(base: () => Promise<Outcome>, subtract: () => Promise<Outcome>): Promise<Outcome> {
  let failure: unknown
  let included: Outcome | undefined
  try {
    included = await base()
    if (!included.allowed) return included
  } catch (error) {
    if (!isDepthExceeded(error)) throw error
    failure = error
  }
  const excluded = await subtract()
  if (excluded.allowed) return DENIED
  if (failure) throw failure
  // A subtraction that met a cycle proves nothing: deny rather than allow.
  if (excluded.cycle) return { allowed: false, cycleAt: excluded.cycleAt, cycle: true }
  return included ?? DENIED
}

interface DirectLookup {
  kind: 'direct'
  objectType: string
  relation: string
  /** The user's own tuples to look for (its id and/or '*'); null when the model admits neither. */
  subject: { type: string; ids: string[]; relation: string } | null
  /** Whether to fetch the userset tuples, to follow them. */
  usersets: boolean
}

type Lookup =
  | DirectLookup
  | {
      kind: 'parents'
      objectType: string
      relation: string
      prefetchFor?: { type: string; ids: string[]; relation: string }
    }

/** The key of the tuples naming one user (`type:id#relation`) on one object (`type:id`). */
const prefetchKey = (object: string, user: { type: string; id: string; relation: string }) =>
  `${object} ${user.type}:${user.id}#${user.relation}`

interface QueuedLookup {
  lookup: Lookup
  waiting: Map<string, PromiseWithResolvers<SubjectRow[]>>
}

/**
 * The tuple lookups of one check: each (lookup, object) is queried once, and lookups asked in the
 * same tick (a rewrite's branches) are merged into one query per lookup with all their object ids.
 */
class TupleLoader {
  readonly #query: (lookups: TupleLookup[]) => Promise<LookupRow[]>
  readonly #loaded = new Map<string, Promise<SubjectRow[]>>()
  /** By parent object and user (prefetchKey): every tuple on it naming the user, whatever the relation. */
  readonly #prefetched = new Map<string, Array<SubjectRow & { relation: string }>>()
  #queued = new Map<string, QueuedLookup>()

  /** `query`: what a round of lookups asks the database (findTuplesForLookups, or a read along with it). */
  constructor(query: (lookups: TupleLookup[]) => Promise<LookupRow[]>) {
    this.#query = query
  }

  load(lookup: Lookup, objectId: string): Promise<SubjectRow[]> {
    const lookupKey = JSON.stringify(lookup)
    const key = `${lookupKey} ${objectId}`
    const loaded = this.#loaded.get(key)
    if (loaded) return loaded
    const prefetched = this.#fromPrefetched(lookup, objectId)
    if (prefetched) {
      this.#loaded.set(key, prefetched)
      return prefetched
    }
    if (this.#queued.size === 0) {
      // After the microtasks already queued have run: the other branches of this round queue theirs.
      void Promise.resolve().then(() => process.nextTick(() => void this.#flush()))
    }
    let queued = this.#queued.get(lookupKey)
    if (!queued) {
      queued = { lookup, waiting: new Map() }
      this.#queued.set(lookupKey, queued)
    }
    const pending = Promise.withResolvers<SubjectRow[]>()
    queued.waiting.set(objectId, pending)
    this.#loaded.set(key, pending.promise)
    return pending.promise
  }

  /**
   * A direct lookup that only asks for the user's own tuples (no usersets to follow) on an object
   * whose tuples naming the user were fetched with its parent: answered without a query.
   */
  #fromPrefetched(lookup: Lookup, objectId: string): Promise<SubjectRow[]> | undefined {
    if (lookup.kind !== 'direct' || lookup.usersets || !lookup.subject) return undefined
    const subject = lookup.subject
    // The user's own id comes first when the relation admits it; a wildcard-only lookup is asked.
    const userId = subject.ids[0]
    if (userId === undefined || userId === '*') return undefined
    const found = this.#prefetched.get(
      prefetchKey(`${lookup.objectType}:${objectId}`, {
        type: subject.type,
        id: userId,
        relation: subject.relation,
      }),
    )
    if (!found) return undefined
    return Promise.resolve(
      found.filter((row) => row.relation === lookup.relation && subject.ids.includes(row.subject_id)),
    )
  }

  async #flush(): Promise<void> {
    const queued = [...this.#queued.values()]
    this.#queued = new Map()
    try {
      const rows = await this.#query(
        queued.map(({ lookup, waiting }) => ({ ...lookup, objectIds: [...waiting.keys()] })),
      )
      // Parents first (each known, if only to have no tuple naming the user), then what names the user.
      const userOf = (row: LookupRow) => {
        const { lookup } = queued[row.lookup] as QueuedLookup
        const user = lookup.kind === 'parents' ? lookup.prefetchFor : undefined
        return user ? { type: user.type, id: user.ids[0] as string, relation: user.relation } : undefined
      }
      for (const row of rows) {
        const user = userOf(row)
        if (!user || row.prefetched_type !== null) continue
        const key = prefetchKey(`${row.subject_type}:${row.subject_id}`, user)
        if (!this.#prefetched.has(key)) this.#prefetched.set(key, [])
      }
      const byLookup = queued.map(() => new Map<string, SubjectRow[]>())
      for (const row of rows) {
        if (row.prefetched_type !== null) {
          const user = userOf(row)
          const key = user && prefetchKey(`${row.prefetched_type}:${row.object_id}`, user)
          if (key) this.#prefetched.get(key)?.push({ ...row, relation: row.prefetched_relation as string })
          continue
        }
        const byObject = byLookup[row.lookup] as Map<string, SubjectRow[]>
        const list = byObject.get(row.object_id)
        if (list) list.push(row)
        else byObject.set(row.object_id, [row])
      }
      queued.forEach(({ waiting }, index) => {
        for (const [objectId, pending] of waiting) pending.resolve(byLookup[index]?.get(objectId) ?? [])
      })
    } catch (error) {
      for (const { waiting } of queued) for (const pending of waiting.values()) pending.reject(error)
    }
  }
}

/** A check for one user; its branches share what they learn (lookups and settled answers). */
class Resolution {
  readonly #model: ModelIndex
  readonly #loader: TupleLoader
  readonly #user: Subject
  /** Answers of object#relation that depend on no cycle cut still open. */
  readonly #settled = new Map<string, Outcome>()
  readonly #directLookups = new Map<string, DirectLookup | null>()
  /** The relations the user can be related to at all through the model, by its type or its type's wildcard. */
  readonly #reachable: ReadonlyArray<ReadonlySet<string>>

  constructor(model: ModelIndex, loader: TupleLoader, user: Subject) {
    this.#model = model
    this.#loader = loader
    this.#user = user
    this.#reachable = user.relation
      ? [model.reachableFrom(`${user.type}#${user.relation}`)]
      : [model.reachableFrom(user.type), model.reachableFrom(`${user.type}:*`)]
  }

  async check(object: ObjectRef, relation: string): Promise<boolean> {
    const outcome = await this.#resolve(object, relation, new Map(), 0)
    return outcome.allowed
  }

  /**
   * `path`: the object#relation pairs being resolved by this check, with their position; `depth`: the
   * usersets and parents followed to get here (a computed userset is none, as in OpenFGA).
   */
  async #resolve(
    object: ObjectRef,
    relation: string,
    path: Map<string, number>,
    depth: number,
  ): Promise<Outcome> {
    if (depth >= MAX_RESOLUTION_DEPTH) throw new ResolutionDepthExceededError()
    const key = `${object.type}:${object.id}#${relation}`
    const position = path.get(key)
    if (position !== undefined) return { allowed: false, cycleAt: position, cycle: true }
    const settled = this.#settled.get(key)
    if (settled !== undefined) return settled
    const user = this.#user
    // A userset contains itself (OpenFGA: a self-defining tuple).
    if (user.relation === relation && user.type === object.type && user.id === object.id) return ALLOWED
    const rewrite = this.#model.relation(object.type, relation)
    // As OpenFGA: no path from the user's type to the relation in the model, no need to look (and no
    // cycle met on the way, which would make a subtraction deny).
    const target = `${object.type}#${relation}`
    if (!rewrite || !this.#reachable.some((reached) => reached.has(target))) return DENIED
    const index = path.size
    path.set(key, index)
    let outcome: Outcome
    try {
      outcome = await this.#rewrite(object, relation, rewrite, path, depth)
    } finally {
      path.delete(key)
    }
    // OpenFGA's recursive fast path, where it takes one, answers without "cycle detected".
    if (outcome.cycle && !user.relation && this.#model.recursiveFastPath(object.type, relation, user.type)) {
      outcome = { ...outcome, cycle: false }
    }
    if (outcome.cycleAt < index) return outcome
    const answer = { ...outcome, cycleAt: Number.POSITIVE_INFINITY }
    this.#settled.set(key, answer)
    return answer
  }

  #rewrite(
    object: ObjectRef,
    relation: string,
    rewrite: Userset,
    path: Map<string, number>,
    depth: number,
  ): Promise<Outcome> {
    if ('this' in rewrite) return this.#direct(object, relation, path, depth)
    if ('computedUserset' in rewrite) {
      return this.#resolve(object, rewrite.computedUserset.relation, path, depth)
    }
    if ('tupleToUserset' in rewrite) {
      const { tupleset, computedUserset } = rewrite.tupleToUserset
      return this.#fromParents(object, tupleset.relation, computedUserset.relation, path, depth)
    }
    const branch = (child: Userset) => (own: Map<string, number>) =>
      this.#rewrite(object, relation, child, own, depth)
    if ('union' in rewrite) return anyOf(together(rewrite.union.child.map(branch), path))
    if ('intersection' in rewrite) return allOf(together(rewrite.intersection.child.map(branch), path))
    const [base, subtract] = together(
      [branch(rewrite.difference.base), branch(rewrite.difference.subtract)],
      path,
    )
    return butNot(base as () => Promise<Outcome>, subtract as () => Promise<Outcome>)
  }

  /** What to ask of object#relation's direct tuples for this user; null when nothing can match. */
  #directLookup(objectType: string, relation: string): DirectLookup | null {
    const cacheKey = `${objectType}#${relation}`
    const cached = this.#directLookups.get(cacheKey)
    if (cached !== undefined) return cached
    const types = this.#model.directlyRelated(objectType, relation)
    const user = this.#user
    const ids: string[] = []
    if (admits(types, user)) ids.push(user.id)
    if (!user.relation && user.id !== '*' && admits(types, { ...user, id: '*' })) ids.push('*')
    const usersets = types.some((ref) => Boolean(ref.relation))
    const lookup: DirectLookup | null =
      ids.length > 0 || usersets
        ? {
            kind: 'direct',
            objectType,
            relation,
            subject: ids.length > 0 ? { type: user.type, ids, relation: user.relation } : null,
            usersets,
          }
        : null
    this.#directLookups.set(cacheKey, lookup)
    return lookup
  }

  async #direct(
    object: ObjectRef,
    relation: string,
    path: Map<string, number>,
    depth: number,
  ): Promise<Outcome> {
    const lookup = this.#directLookup(object.type, relation)
    if (!lookup) return DENIED
    const rows = await this.#loader.load(lookup, object.id)
    const types = this.#model.directlyRelated(object.type, relation)
    const user = this.#user
    const usersets: Subject[] = []
    for (const row of rows) {
      const subject = { type: row.subject_type, id: row.subject_id, relation: row.subject_relation }
      const namesUser =
        subject.type === user.type &&
        subject.relation === user.relation &&
        (subject.id === user.id || subject.id === '*')
      if (lookup.subject && namesUser) return ALLOWED
      // Tuples the model no longer admits (written under an older model) are ignored, as OpenFGA does.
      if (subject.relation && admits(types, subject)) usersets.push(subject)
    }
    return anyOf(usersets.map((subject) => () => this.#resolve(subject, subject.relation, path, depth + 1)))
  }

  async #fromParents(
    object: ObjectRef,
    tupleset: string,
    relation: string,
    path: Map<string, number>,
    depth: number,
  ): Promise<Outcome> {
    const user = this.#user
    const rows = await this.#loader.load(
      {
        kind: 'parents',
        objectType: object.type,
        relation: tupleset,
        // The next step asks the parents' relations of this user: fetched in the same statement.
        prefetchFor: {
          type: user.type,
          ids: user.relation || user.id === '*' ? [user.id] : [user.id, '*'],
          relation: user.relation,
        },
      },
      object.id,
    )
    const types = this.#model.directlyRelated(object.type, tupleset)
    const parents = rows
      .map((row) => ({ type: row.subject_type, id: row.subject_id, relation: '' }))
      .filter(
        (parent) =>
          parent.id !== '*' && admits(types, parent) && this.#model.hasRelation(parent.type, relation),
      )
    return anyOf(parents.map((parent) => () => this.#resolve(parent, relation, path, depth + 1)))
  }
}

export class EmbeddedAuthorization implements AuthorizationPort {
  readonly #db: Kysely<Database>
  readonly #model: ModelIndex
  #closed = false

  /** Throws UnsupportedModelError for a model this evaluator would answer wrongly (conditions). */
  constructor(db: Kysely<Database>, model: ModelIndex) {
    refuseUnsupported(model)
    this.#db = db
    this.#model = model
  }

  check(request: CheckRequest): Promise<boolean> {
    return this.#answer(async () => {
      const loader = new TupleLoader((lookups) => findTuplesForLookups(this.#db, lookups))
      return this.#resolve(request, loader)
    })
  }

  /** The request checked against the model, then resolved with `loader`'s lookups. */
  #resolve(request: CheckRequest, loader: TupleLoader): Promise<boolean> {
    const object = parseTarget(request.object)
    const relation = parseName(request.relation, 'relation')
    requireRelation(this.#model, object.type, relation)
    const user = modelSubject(this.#model, request.user)
    return new Resolution(this.#model, loader, user).check(object, relation)
  }

  /**
   * `check`, plus a read from `db` (Permissions' CheckAlongRead, not a port operation): when `db` is
   * the one this evaluator reads, the read is composed as a subquery into the statement of the
   * check's first round of lookups (one round trip where the two cost two). The answer is exactly
   * `check`'s; the rows are the read's, read alone when the check needs no lookup or `db` is another
   * database.
   */
  checkWithRead<Row extends object>(
    request: CheckRequest,
    db: Kysely<Database>,
    read: RowsRead<Row>,
  ): Promise<{ allowed: boolean; rows: Row[] }> {
    if (db !== this.#db) {
      return this.#answer(async () => {
        const rows = await read.execute()
        return { allowed: await this.check(request), rows }
      })
    }
    return this.#answer(async () => {
      let combined: Promise<{ rows: Row[]; lookupRows: LookupRow[] }> | undefined
      const loader = new TupleLoader((lookups) => {
        if (combined) return findTuplesForLookups(this.#db, lookups)
        combined = findWithLookups(this.#db, read, lookups)
        return combined.then(({ lookupRows }) => lookupRows)
      })
      let allowed: boolean
      try {
        allowed = await this.#resolve(request, loader)
      } catch (error) {
        combined?.catch(() => undefined)
        throw error
      }
      // A check can settle before its first round's statement answers (a union's allowed branch).
      const rows = combined ? (await combined).rows : await read.execute()
      return { allowed, rows }
    })
  }

  /** One transaction; deletes first. A tuple both written and deleted in one call is rejected (as by OpenFGA). */
  write(writes: TupleKey[], deletes: TupleKey[]): Promise<void> {
    return this.#answer(async () => {
      const toWrite = writes.map((tuple) => writableTuple(this.#model, tuple))
      // Deletes are checked for form only, so that tuples an older model allowed can still be removed.
      const toDelete = deletes.map((tuple) => tupleRow(tuple))
      const deleted = new Set(toDelete.map(rowKey))
      const both = toWrite.find((row) => deleted.has(rowKey(row)))
      if (both) {
        throw new AuthorizationRequestError(
          `a tuple cannot be written and deleted at once: ${describeRow(both)}`,
        )
      }
      if (toWrite.length === 0 && toDelete.length === 0) return
      // Two writes of overlapping tuples in opposite orders can deadlock: inTransaction runs it again.
      await inTransaction(this.#db, async (trx) => {
        await deleteTuples(trx, toDelete)
        await insertTuples(trx, toWrite)
      })
    })
  }

  /**
   * Records tuple changes inside the caller's transaction on `db`, in their order, when this
   * evaluator reads that same database (see TupleRecorder); null for another database.
   */
  recorderFor(db: Kysely<Database>): TupleRecorder | null {
    if (db !== this.#db) return null
    const model = this.#model
    return {
      async record(trx, changes, now) {
        // Writes only (a resource's creation): the tuples and their log in one statement.
        if (changes.length > 0 && changes.every((change) => change.operation === 'write')) {
          const rows = changes.map((c) =>
            writableTuple(model, { user: c.subject, relation: c.relation, object: c.object }),
          )
          await insertTuplesLogged(trx, rows, outboxRowsOf(changes, now, true))
          return
        }
        for (const change of changes) {
          const key = { user: change.subject, relation: change.relation, object: change.object }
          if (change.operation === 'write') await insertTuples(trx, [writableTuple(model, key)])
          else await deleteTuples(trx, [tupleRow(key)])
        }
        await enqueueTupleChanges(trx, changes, now, true)
      },
      deliver: async () => {},
    }
  }

  ready(): Promise<void> {
    return this.#answer(async () => {
      await sql`select 1`.execute(this.#db)
    })
  }

  /** The database belongs to the caller: closing only stops this adapter from answering. */
  async close(): Promise<void> {
    this.#closed = true
  }

  /**
   * Runs one operation; anything but a request the model rejects, or a value of the request the
   * database refuses as data (a NUL character in an object id), means the evaluator cannot answer.
   */
  async #answer<T>(work: () => Promise<T>): Promise<T> {
    if (this.#closed)
      throw new AuthorizationUnavailableError('the embedded authorization evaluator is closed')
    try {
      return await work()
    } catch (error) {
      if (error instanceof AuthorizationRequestError || error instanceof AuthorizationUnavailableError)
        throw error
      if (isDataException(error)) throw error
      throw new AuthorizationUnavailableError(
        `the embedded authorization evaluator cannot answer: ${(error as Error)?.message ?? String(error)}`,
        { cause: error },
      )
    }
  }
}

function requireRelation(model: ModelIndex, type: string, relation: string): void {
  if (!model.hasType(type)) {
    throw new AuthorizationRequestError(`type ${quote(type)} is not in the authorization model`)
  }
  if (!model.hasRelation(type, relation)) {
    throw new AuthorizationRequestError(
      `relation ${quote(`${type}#${relation}`)} is not in the authorization model`,
    )
  }
}

/** A well-formed user whose type (and userset relation) the model defines. */
function modelSubject(model: ModelIndex, value: unknown): Subject {
  const subject = parseSubject(value)
  if (!model.hasType(subject.type)) {
    throw new AuthorizationRequestError(`type ${quote(subject.type)} is not in the authorization model`)
  }
  if (subject.relation) requireRelation(model, subject.type, subject.relation)
  return subject
}

/** The row of a well-formed tuple (not checked against the model). */
function tupleRow(tuple: TupleKey): TupleRow {
  const object = parseTarget(tuple.object)
  const relation = parseName(tuple.relation, 'relation')
  const subject = parseSubject(tuple.user)
  return {
    object_type: object.type,
    object_id: object.id,
    relation,
    subject_type: subject.type,
    subject_id: subject.id,
    subject_relation: subject.relation,
  }
}

/**
 * The row of a tuple OpenFGA would accept under the model (its ValidateTupleForWrite): the relation
 * admits the user's type directly, and, the tuple having no condition, through a type restriction
 * without one: under `[user with c]` alone a tuple without a condition is refused ("condition is
 * missing"), under `[user, user with c]` it is accepted.
 */
export function writableTuple(model: ModelIndex, tuple: TupleKey): TupleRow {
  const row = tupleRow(tuple)
  requireRelation(model, row.object_type, row.relation)
  // A userset contains itself without a tuple: OpenFGA refuses to write `group:a#member member group:a`.
  if (
    row.subject_relation === row.relation &&
    row.subject_type === row.object_type &&
    row.subject_id === row.object_id
  ) {
    throw new AuthorizationRequestError(
      `${quote(tuple.user)} ${row.relation} ${quote(tuple.object)} is implicit: it cannot be written`,
    )
  }
  const subject = modelSubject(model, tuple.user)
  const types = model.directlyRelated(row.object_type, row.relation)
  if (admits(types, subject)) return row
  const target = quote(`${row.object_type}#${row.relation}`)
  const conditional = types.filter((ref) => ref.condition && matchesType(ref, subject))
  if (conditional.length > 0) {
    const names = [...new Set(conditional.map((ref) => ref.condition))].join(', ')
    throw new AuthorizationRequestError(
      `${quote(tuple.user)} can only be related to ${target} with a condition (${names}): the tuple has none`,
    )
  }
  throw new AuthorizationRequestError(
    `${quote(tuple.user)} cannot be related to ${target}: it admits ${describeTypes(types)}`,
  )
}

const rowKey = (row: TupleRow) =>
  [row.object_type, row.object_id, row.relation, row.subject_type, row.subject_id, row.subject_relation].join(
    '\n',
  )

const describeRow = (row: TupleRow) =>
  `${row.subject_type}:${row.subject_id}${row.subject_relation ? `#${row.subject_relation}` : ''} ${row.relation} ${row.object_type}:${row.object_id}`
