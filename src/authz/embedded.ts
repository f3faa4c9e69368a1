import { type Kysely, sql } from 'kysely'
import { inTransaction, isDataException } from '../db/database.ts'
import type { Database } from '../db/schema.ts'
import type { ModelIndex, RelationReference } from './model.ts'
import {
  type AuthorizationPort,
  AuthorizationRequestError,
  AuthorizationUnavailableError,
  type CheckRequest,
  type TupleKey,
} from './port.ts'
import {
  compileRelationPlans,
  type PlanNode,
  type RelationPlan,
  type RelationPlans,
} from './relation-plans.ts'
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
// relation) is made once per check. The walk is synchronous, over the model compiled into plans
// (src/authz/relation-plans.ts): a branch whose lookup is not loaded yet answers pending and the
// others go on, then every lookup the walk asked for is loaded in one statement (one part per
// (type, relation) with all its object ids) and the walk starts again, keeping what it settled.
// Unions stop at the first allow, intersections at the first deny, exclusions skip the subtraction
// when the base denies; branches are walked in their order.
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

/**
 * What a branch answers while a lookup it needs is not loaded yet: the driver (Resolution.check)
 * loads every lookup the walk asked for in one statement and walks again.
 */
const PENDING: Outcome = { allowed: false, cycleAt: Number.POSITIVE_INFINITY, cycle: false }
/** The branch followed more than MAX_RESOLUTION_DEPTH usersets and parents. */
const TOO_DEEP: Outcome = { allowed: false, cycleAt: Number.POSITIVE_INFINITY, cycle: false }

/** A lookup's subject: the user's own tuples to look for (its id and/or '*'). */
interface LookupSubject {
  type: string
  ids: string[]
  relation: string
}

/**
 * A lookup of a check (its user fixed): what it asks of one type#relation, and the rows it has
 * loaded by object id, each object asked once.
 */
interface Lookup {
  kind: 'direct' | 'parents'
  objectType: string
  relation: string
  /** direct: the user's own tuples to look for; null when the model admits neither its id nor '*'. */
  subject: LookupSubject | null
  /** direct: whether to fetch the userset tuples, to follow them. */
  usersets: boolean
  /** parents: the user's forms whose tuples on the parents are fetched along with them. */
  prefetchFor: LookupSubject | undefined
  loaded: Map<string, SubjectRow[]>
  /** Object ids asked for and not loaded yet. */
  queued: string[]
}

type PrefetchedRow = SubjectRow & { relation: string }

/**
 * The tuple lookups of one check: each (lookup, object) is queried once, and the lookups a walk
 * asks for are loaded together, in one query with one part per lookup and all its object ids.
 */
class TupleLoader {
  readonly #query: (lookups: TupleLookup[]) => Promise<LookupRow[]>
  /** By parent type, then id: every tuple on it naming the user, whatever the relation. */
  readonly #prefetched = new Map<string, Map<string, PrefetchedRow[]>>()
  #queued: Lookup[] = []

  /** `query`: what a round of lookups asks the database (findTuplesForLookups, or a read along with it). */
  constructor(query: (lookups: TupleLookup[]) => Promise<LookupRow[]>) {
    this.#query = query
  }

  /** The rows of `lookup` on `objectId`, or undefined after queueing it for the next round. */
  rows(lookup: Lookup, objectId: string): SubjectRow[] | undefined {
    const loaded = lookup.loaded.get(objectId)
    if (loaded) return loaded
    const prefetched = this.#fromPrefetched(lookup, objectId)
    if (prefetched) {
      lookup.loaded.set(objectId, prefetched)
      return prefetched
    }
    if (lookup.queued.length === 0) this.#queued.push(lookup)
    if (!lookup.queued.includes(objectId)) lookup.queued.push(objectId)
    return undefined
  }

  get waiting(): boolean {
    return this.#queued.length > 0
  }

  /**
   * A direct lookup that only asks for the user's own tuples (no usersets to follow) on an object
   * whose tuples naming the user were fetched with its parent: answered without a query.
   */
  #fromPrefetched(lookup: Lookup, objectId: string): SubjectRow[] | undefined {
    const subject = lookup.subject
    if (lookup.kind !== 'direct' || lookup.usersets || !subject) return undefined
    // The user's own id comes first when the relation admits it; a wildcard-only lookup is asked.
    if (subject.ids[0] === '*') return undefined
    const found = this.#prefetched.get(lookup.objectType)?.get(objectId)
    if (!found) return undefined
    return found.filter((row) => row.relation === lookup.relation && subject.ids.includes(row.subject_id))
  }

  /** Loads every queued lookup in one query. */
  async load(): Promise<void> {
    const queued = this.#queued
    this.#queued = []
    const rows = await this.#query(
      queued.map((lookup) =>
        lookup.kind === 'parents'
          ? {
              kind: 'parents',
              objectType: lookup.objectType,
              relation: lookup.relation,
              objectIds: lookup.queued,
              ...(lookup.prefetchFor ? { prefetchFor: lookup.prefetchFor } : {}),
            }
          : {
              kind: 'direct',
              objectType: lookup.objectType,
              relation: lookup.relation,
              objectIds: lookup.queued,
              subject: lookup.subject,
              usersets: lookup.usersets,
            },
      ),
    )
    // Every parent of a lookup that prefetches is known, if only to have no tuple naming the user.
    for (const row of rows) {
      if (row.prefetched_type !== null || !(queued[row.lookup] as Lookup).prefetchFor) continue
      let byId = this.#prefetched.get(row.subject_type)
      if (!byId) {
        byId = new Map()
        this.#prefetched.set(row.subject_type, byId)
      }
      if (!byId.has(row.subject_id)) byId.set(row.subject_id, [])
    }
    for (const lookup of queued) for (const objectId of lookup.queued) lookup.loaded.set(objectId, [])
    for (const row of rows) {
      if (row.prefetched_type !== null) {
        const found = this.#prefetched.get(row.prefetched_type)?.get(row.object_id)
        found?.push({ ...row, relation: row.prefetched_relation as string })
        continue
      }
      ;(queued[row.lookup] as Lookup).loaded.get(row.object_id)?.push(row)
    }
    for (const lookup of queued) lookup.queued = []
  }
}

/** What a check keeps about one object#relation: its position on the path being resolved, its answer. */
interface NodeState {
  /** -1 when not being resolved. */
  position: number
  settled: Outcome | undefined
}

/**
 * A check for one user, resolved synchronously over the tuples loaded so far: a branch that needs
 * a lookup not loaded yet answers PENDING and queues it, the other branches go on (queueing theirs),
 * and check() loads all of them in one statement and walks again from the top; what was settled
 * stays settled. Branches are walked in order, one after the other, so one path (a stack) serves
 * them all.
 */
class Resolution {
  readonly #model: ModelIndex
  readonly #loader: TupleLoader
  readonly #user: Subject
  /** By plan index: by object id, what is known of object#relation. */
  readonly #nodes: Array<Map<string, NodeState> | undefined>
  /** By plan index: the direct lookup of the relation (null: nothing can match). */
  readonly #direct: Array<Lookup | null | undefined>
  /** By plan index of the tupleset relation: the parents lookup. */
  readonly #parents: Array<Lookup | undefined>
  /** The relations the user can be related to at all through the model, by its type or its type's wildcard. */
  readonly #reachable: ReadonlyArray<ReadonlySet<string>>
  /** The user's forms whose tuples on a parent are fetched with it. */
  readonly #prefetchFor: LookupSubject
  #pathSize = 0

  constructor(model: ModelIndex, plans: RelationPlans, loader: TupleLoader, user: Subject) {
    this.#model = model
    this.#loader = loader
    this.#user = user
    this.#nodes = new Array(plans.count)
    this.#direct = new Array(plans.count)
    this.#parents = new Array(plans.count)
    this.#reachable = user.relation
      ? [model.reachableFrom(`${user.type}#${user.relation}`)]
      : [model.reachableFrom(user.type), model.reachableFrom(`${user.type}:*`)]
    this.#prefetchFor = {
      type: user.type,
      ids: user.relation || user.id === '*' ? [user.id] : [user.id, '*'],
      relation: user.relation,
    }
  }

  async check(plan: RelationPlan, objectId: string): Promise<boolean> {
    for (;;) {
      const outcome = this.#resolve(plan, objectId, 0)
      if (outcome === TOO_DEEP) throw new ResolutionDepthExceededError()
      if (outcome !== PENDING) return outcome.allowed
      if (!this.#loader.waiting) throw new Error('the authorization check waits for no lookup')
      await this.#loader.load()
    }
  }

  /**
   * `depth`: the usersets and parents followed to get here (a computed userset is none, as in
   * OpenFGA); the path is the nodes whose position is not -1.
   */
  #resolve(plan: RelationPlan | undefined | null, objectId: string, depth: number): Outcome {
    if (depth >= MAX_RESOLUTION_DEPTH) return TOO_DEEP
    if (!plan) return DENIED
    let nodes = this.#nodes[plan.index]
    if (!nodes) {
      nodes = new Map()
      this.#nodes[plan.index] = nodes
    }
    let node = nodes.get(objectId)
    if (!node) {
      node = { position: -1, settled: undefined }
      nodes.set(objectId, node)
    }
    if (node.position !== -1) return { allowed: false, cycleAt: node.position, cycle: true }
    if (node.settled !== undefined) return node.settled
    const user = this.#user
    // A userset contains itself (OpenFGA: a self-defining tuple).
    if (user.relation === plan.relation && user.type === plan.type && user.id === objectId) return ALLOWED
    // As OpenFGA: no path from the user's type to the relation in the model, no need to look (and no
    // cycle met on the way, which would make a subtraction deny).
    if (!this.#reachable.some((reached) => reached.has(plan.target))) return DENIED
    const index = this.#pathSize++
    node.position = index
    let outcome: Outcome
    try {
      outcome = this.#rewrite(plan, plan.rewrite, objectId, depth)
    } finally {
      node.position = -1
      this.#pathSize--
    }
    if (outcome === PENDING || outcome === TOO_DEEP) return outcome
    // OpenFGA's recursive fast path, where it takes one, answers without "cycle detected".
    if (outcome.cycle && !user.relation && this.#fastPath(plan)) outcome = { ...outcome, cycle: false }
    if (outcome.cycleAt < index) return outcome
    const answer =
      outcome.cycleAt === Number.POSITIVE_INFINITY
        ? outcome
        : { ...outcome, cycleAt: Number.POSITIVE_INFINITY }
    node.settled = answer
    return answer
  }

  #fastPath(plan: RelationPlan): boolean {
    const userType = this.#user.type
    let fast = plan.fastPath.get(userType)
    if (fast === undefined) {
      fast = this.#model.recursiveFastPath(plan.type, plan.relation, userType)
      plan.fastPath.set(userType, fast)
    }
    return fast
  }

  #rewrite(plan: RelationPlan, rewrite: PlanNode, objectId: string, depth: number): Outcome {
    switch (rewrite.kind) {
      case 'direct':
        return this.#directly(plan, objectId, depth)
      case 'computed':
        return this.#resolve(rewrite.plan, objectId, depth)
      case 'parents':
        return this.#fromParents(rewrite.tupleset, rewrite.computed, objectId, depth)
      case 'union': {
        // Allowed as soon as one branch allows; a depth error only counts when nothing allows.
        let denied = DENIED
        let pending = false
        let tooDeep = false
        for (const child of rewrite.children) {
          const outcome = this.#rewrite(plan, child, objectId, depth)
          if (outcome === PENDING) pending = true
          else if (outcome === TOO_DEEP) tooDeep = true
          else if (outcome.allowed) return ALLOWED
          else denied = unionOfDenials(denied, outcome)
        }
        return pending ? PENDING : tooDeep ? TOO_DEEP : denied
      }
      case 'intersection': {
        // The first branch (in order) that denies; a depth error only counts when nothing denies.
        let pending = false
        let tooDeep = false
        for (const child of rewrite.children) {
          const outcome = this.#rewrite(plan, child, objectId, depth)
          if (outcome === PENDING) pending = true
          else if (outcome === TOO_DEEP) tooDeep = true
          // Denied either way; which denial (and its cycle) waits for the branches before it.
          else if (!outcome.allowed) return pending ? PENDING : outcome
        }
        return pending ? PENDING : tooDeep ? TOO_DEEP : ALLOWED
      }
      case 'difference': {
        // The subtraction only matters when the base allows (or could not be resolved).
        const included = this.#rewrite(plan, rewrite.base, objectId, depth)
        if (included !== PENDING && included !== TOO_DEEP && !included.allowed) return included
        const excluded = this.#rewrite(plan, rewrite.subtract, objectId, depth)
        if (included === PENDING || excluded === PENDING) return PENDING
        if (excluded === TOO_DEEP) return TOO_DEEP
        if (excluded.allowed) return DENIED
        if (included === TOO_DEEP) return TOO_DEEP
        // A subtraction that met a cycle proves nothing: deny rather than allow.
        if (excluded.cycle) return { allowed: false, cycleAt: excluded.cycleAt, cycle: true }
        return included
      }
    }
  }

  /** What to ask of object#relation's direct tuples for this user; null when nothing can match. */
  #directLookup(plan: RelationPlan): Lookup | null {
    const cached = this.#direct[plan.index]
    if (cached !== undefined) return cached
    const user = this.#user
    const ids: string[] = []
    if (admits(plan.types, user)) ids.push(user.id)
    if (!user.relation && user.id !== '*' && admits(plan.types, { ...user, id: '*' })) ids.push('*')
    const lookup: Lookup | null =
      ids.length > 0 || plan.usersets
        ? {
            kind: 'direct',
            objectType: plan.type,
            relation: plan.relation,
            subject: ids.length > 0 ? { type: user.type, ids, relation: user.relation } : null,
            usersets: plan.usersets,
            prefetchFor: undefined,
            loaded: new Map(),
            queued: [],
          }
        : null
    this.#direct[plan.index] = lookup
    return lookup
  }

  #directly(plan: RelationPlan, objectId: string, depth: number): Outcome {
    const lookup = this.#directLookup(plan)
    if (!lookup) return DENIED
    const rows = this.#loader.rows(lookup, objectId)
    if (!rows) return PENDING
    const user = this.#user
    if (lookup.subject) {
      for (const row of rows) {
        if (
          row.subject_type === user.type &&
          row.subject_relation === user.relation &&
          (row.subject_id === user.id || row.subject_id === '*')
        )
          return ALLOWED
      }
    }
    // The usersets, one after the other (any of them).
    return this.#anyOf(rows, depth, plan.usersetPlans, null)
  }

  #fromParents(
    tupleset: RelationPlan | undefined,
    computed: ReadonlyMap<string, RelationPlan>,
    objectId: string,
    depth: number,
  ): Outcome {
    if (!tupleset) return DENIED
    let lookup = this.#parents[tupleset.index]
    if (!lookup) {
      lookup = {
        kind: 'parents',
        objectType: tupleset.type,
        relation: tupleset.relation,
        subject: null,
        usersets: false,
        // The next step asks the parents' relations of this user: fetched in the same statement.
        prefetchFor: this.#prefetchFor,
        loaded: new Map(),
        queued: [],
      }
      this.#parents[tupleset.index] = lookup
    }
    const rows = this.#loader.rows(lookup, objectId)
    if (!rows) return PENDING
    return this.#anyOf(rows, depth, null, computed)
  }

  /**
   * A union over what the rows lead to, resolved one after the other: allowed at the first allow.
   * With `usersets`, the rows are userset tuples, each leading to its userset's plan; without, they
   * are parent tuples, each leading to `computed` of the parent's type.
   */
  #anyOf(
    rows: readonly SubjectRow[],
    depth: number,
    usersets: RelationPlan['usersetPlans'] | null,
    computed: ReadonlyMap<string, RelationPlan> | null,
  ): Outcome {
    let denied = DENIED
    let pending = false
    let tooDeep = false
    for (const row of rows) {
      let next: RelationPlan | null | undefined
      if (usersets) {
        if (!row.subject_relation) continue
        // Tuples the model no longer admits (written under an older model) are ignored, as OpenFGA does.
        next = usersets.get(row.subject_type)?.get(row.subject_relation)
        if (next === undefined) continue
      } else {
        if (row.subject_id === '*' || row.subject_relation) continue
        next = computed?.get(row.subject_type)
        if (!next) continue
      }
      const outcome = this.#resolve(next, row.subject_id, depth + 1)
      if (outcome === PENDING) pending = true
      else if (outcome === TOO_DEEP) tooDeep = true
      else if (outcome.allowed) return ALLOWED
      else denied = unionOfDenials(denied, outcome)
    }
    return pending ? PENDING : tooDeep ? TOO_DEEP : denied
  }
}

/** Two denials of a union's branches as one: the lowest open cycle cut, and whether any met a cycle. */
function unionOfDenials(a: Outcome, b: Outcome): Outcome {
  if (b === DENIED) return a
  if (a === DENIED) return b
  return { allowed: false, cycleAt: Math.min(a.cycleAt, b.cycleAt), cycle: a.cycle || b.cycle }
}

export class EmbeddedAuthorization implements AuthorizationPort {
  readonly #db: Kysely<Database>
  readonly #model: ModelIndex
  readonly #plans: RelationPlans
  #closed = false

  /** Throws UnsupportedModelError for a model this evaluator would answer wrongly (conditions). */
  constructor(db: Kysely<Database>, model: ModelIndex) {
    refuseUnsupported(model)
    this.#db = db
    this.#model = model
    this.#plans = compileRelationPlans(model)
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
    const plan = this.#plans.byType.get(object.type)?.get(relation) as RelationPlan
    return new Resolution(this.#model, this.#plans, loader, user).check(plan, object.id)
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
