import type { CheckRequest, TupleKey } from '../../src/authz/port.ts'

// Random authorization models, tuples and checks for differential testing of the embedded evaluator
// against OpenFGA. Everything comes from one seeded generator, so that a seed replays a case exactly.
//
// The models use what the embedded evaluator evaluates: direct type restrictions (user types, their
// wildcards, object types and usersets `type#relation`), computed usersets, tuple-to-userset, union,
// intersection and exclusion, nested in any order; never conditions. They are built to pass most of
// OpenFGA's validation (computed usersets only point to relations defined earlier in their type, so
// they never form a loop; a tupleset relation is directly assignable to object types only), but
// not all of it: a relation may be left without an entrypoint, and OpenFGA then refuses the model.

/** mulberry32: a small, fast 32-bit PRNG, good enough to pick among a few options. */
export class Random {
  #state: number

  constructor(seed: number) {
    this.#state = seed >>> 0
  }

  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0
    let t = this.#state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1))
  }

  chance(probability: number): boolean {
    return this.next() < probability
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list')
    return items[Math.floor(this.next() * items.length)] as T
  }

  /** `count` distinct items (fewer when there are not as many). */
  sample<T>(items: readonly T[], count: number): T[] {
    const pool = [...items]
    const picked: T[] = []
    while (picked.length < count && pool.length > 0) {
      picked.push(pool.splice(Math.floor(this.next() * pool.length), 1)[0] as T)
    }
    return picked
  }
}

/** A type restriction of a directly assignable relation: `user`, `user:*`, `folder`, `group#member`. */
export interface Restriction {
  type: string
  relation?: string
  wildcard?: boolean
}

export type Rewrite =
  | { kind: 'direct' }
  | { kind: 'computed'; relation: string }
  | { kind: 'ttu'; tupleset: string; relation: string }
  | { kind: 'union' | 'intersection'; children: Rewrite[] }
  | { kind: 'exclusion'; base: Rewrite; subtract: Rewrite }

export interface GeneratedRelation {
  name: string
  rewrite: Rewrite
  /** The type restrictions, when the rewrite has its direct part. */
  restrictions: Restriction[]
}

export interface GeneratedType {
  name: string
  relations: GeneratedRelation[]
}

export interface GeneratedModel {
  types: GeneratedType[]
  /** Each type's object ids the tuples and checks use. */
  objectIds: string[]
  /** The ids of each user type (types without relations) the tuples and checks use. */
  userIds: Record<string, string[]>
}

const USER_IDS = ['u1', 'u2']
const OBJECT_IDS = ['a', 'b', 'c']
const OBJECT_TYPES = ['team', 'folder', 'doc']
const RELATIONS = ['r0', 'r1', 'r2', 'r3']
const TUPLESET = 'parent'

function restrictionText(r: Restriction): string {
  return `${r.type}${r.wildcard ? ':*' : ''}${r.relation ? `#${r.relation}` : ''}`
}

function rewriteText(rewrite: Rewrite, restrictions: Restriction[], nested: boolean): string {
  const wrap = (text: string) => (nested ? `(${text})` : text)
  switch (rewrite.kind) {
    case 'direct':
      return `[${restrictions.map(restrictionText).join(', ')}]`
    case 'computed':
      return rewrite.relation
    case 'ttu':
      return `${rewrite.relation} from ${rewrite.tupleset}`
    case 'union':
    case 'intersection':
      return wrap(
        rewrite.children
          .map((child) => rewriteText(child, restrictions, true))
          .join(rewrite.kind === 'union' ? ' or ' : ' and '),
      )
    case 'exclusion':
      return wrap(
        `${rewriteText(rewrite.base, restrictions, true)} but not ${rewriteText(rewrite.subtract, restrictions, true)}`,
      )
  }
}

/** The model in OpenFGA's DSL (schema 1.1). */
export function modelDsl(model: GeneratedModel): string {
  const lines = ['model', '  schema 1.1']
  for (const type of model.types) {
    lines.push(`type ${type.name}`)
    if (type.relations.length === 0) continue
    lines.push('  relations')
    for (const relation of type.relations) {
      lines.push(
        `    define ${relation.name}: ${rewriteText(relation.rewrite, relation.restrictions, false)}`,
      )
    }
  }
  return `${lines.join('\n')}\n`
}

/** A random model: one or two user types and two or three object types with two to five relations each. */
export function generateModel(random: Random): GeneratedModel {
  const userTypes = random.chance(0.4) ? ['user', 'bot'] : ['user']
  const objectTypes = OBJECT_TYPES.slice(0, random.int(2, 3))
  const relationNames = new Map(
    objectTypes.map((type) => [type, RELATIONS.slice(0, random.int(2, RELATIONS.length))]),
  )
  const tuplesetTypes = new Map<string, string[]>()
  for (const type of objectTypes) {
    if (random.chance(0.6)) tuplesetTypes.set(type, random.sample(objectTypes, random.int(1, 2)))
  }

  const restrictions = (): Restriction[] => {
    const options: Restriction[] = []
    for (const type of userTypes) options.push({ type }, { type, wildcard: true })
    for (const type of objectTypes) {
      options.push({ type })
      for (const relation of relationNames.get(type) ?? []) options.push({ type, relation })
    }
    // Users of a user type in most relations, so that most relations can be reached.
    const chosen = random.sample(options, random.int(1, 3))
    if (!chosen.some((r) => userTypes.includes(r.type) && !r.wildcard) && random.chance(0.6)) {
      chosen.unshift({ type: random.pick(userTypes) })
    }
    const seen = new Set<string>()
    return chosen.filter((r) => {
      const key = restrictionText(r)
      if (seen.has(key)) return false
      seen.add(key)
      return true
    })
  }

  const types: GeneratedType[] = userTypes.map((name) => ({ name, relations: [] }))
  for (const type of objectTypes) {
    const names = relationNames.get(type) ?? []
    const parents = tuplesetTypes.get(type)
    const relations: GeneratedRelation[] = []
    if (parents) {
      relations.push({
        name: TUPLESET,
        rewrite: { kind: 'direct' },
        restrictions: parents.map((parent) => ({ type: parent })),
      })
    }
    names.forEach((name, index) => {
      const earlier = names.slice(0, index)
      // `x from parent` for the relations one of the parent types has.
      const inherited = parents
        ? [...new Set(parents.flatMap((parent) => relationNames.get(parent) ?? []))]
        : []
      const leaf = (canBeDirect: boolean): Rewrite => {
        const options: Array<() => Rewrite> = []
        if (canBeDirect)
          options.push(
            () => ({ kind: 'direct' }),
            () => ({ kind: 'direct' }),
          )
        if (earlier.length > 0) options.push(() => ({ kind: 'computed', relation: random.pick(earlier) }))
        if (inherited.length > 0) {
          options.push(() => ({ kind: 'ttu', tupleset: TUPLESET, relation: random.pick(inherited) }))
        }
        return random.pick(options)()
      }
      // The direct part, when there is one, must come first in the DSL: only the leftmost leaf may be it.
      const expression = (depth: number, canBeDirect: boolean): Rewrite => {
        if (depth === 0 || random.chance(0.4)) return leaf(canBeDirect)
        const operator = random.next()
        if (operator < 0.45) {
          const count = random.chance(0.2) ? 3 : 2
          return {
            kind: 'union',
            children: Array.from({ length: count }, (_, i) => expression(depth - 1, canBeDirect && i === 0)),
          }
        }
        if (operator < 0.75) {
          const count = random.chance(0.2) ? 3 : 2
          return {
            kind: 'intersection',
            children: Array.from({ length: count }, (_, i) => expression(depth - 1, canBeDirect && i === 0)),
          }
        }
        return {
          kind: 'exclusion',
          base: expression(depth - 1, canBeDirect),
          subtract: expression(depth - 1, false),
        }
      }
      // With nothing else to point to, a relation can only be directly assignable.
      const alone = earlier.length === 0 && inherited.length === 0
      const rewrite: Rewrite = alone ? { kind: 'direct' } : expression(random.int(0, 2), true)
      relations.push({ name, rewrite, restrictions: hasDirect(rewrite) ? restrictions() : [] })
    })
    types.push({ name: type, relations })
  }
  return {
    types,
    objectIds: OBJECT_IDS,
    userIds: Object.fromEntries(userTypes.map((type) => [type, USER_IDS.slice(0, type === 'user' ? 2 : 1)])),
  }
}

function hasDirect(rewrite: Rewrite): boolean {
  switch (rewrite.kind) {
    case 'direct':
      return true
    case 'union':
    case 'intersection':
      return rewrite.children.some(hasDirect)
    case 'exclusion':
      return hasDirect(rewrite.base)
    default:
      return false
  }
}

const isUserType = (model: GeneratedModel, type: string) => type in model.userIds

/** A subject a restriction admits, drawn from the model's ids. */
function subjectFor(model: GeneratedModel, restriction: Restriction, random: Random): string {
  if (restriction.wildcard) return `${restriction.type}:*`
  const ids = isUserType(model, restriction.type) ? (model.userIds[restriction.type] ?? []) : model.objectIds
  const id = random.pick(ids)
  return restriction.relation
    ? `${restriction.type}:${id}#${restriction.relation}`
    : `${restriction.type}:${id}`
}

const isImplicit = (t: TupleKey) => t.user === `${t.object}#${t.relation}`

/**
 * Between `min` and `max` distinct tuples the model admits, each in its relation's type restrictions
 * and none implicit (`team:a#r0 r0 team:a`, which OpenFGA refuses to write).
 */
export function generateTuples(model: GeneratedModel, random: Random, min: number, max: number): TupleKey[] {
  const assignable = model.types.flatMap((type) =>
    type.relations
      .filter((r) => r.restrictions.length > 0)
      .map((relation) => ({ type: type.name, relation })),
  )
  if (assignable.length === 0) return []
  const wanted = random.int(min, max)
  const tuples = new Map<string, TupleKey>()
  const withParent = new Set<string>()
  for (let attempt = 0; attempt < wanted * 4 && tuples.size < wanted; attempt++) {
    const { type, relation } = random.pick(assignable)
    const tuple = {
      user: subjectFor(model, random.pick(relation.restrictions), random),
      relation: relation.name,
      object: `${type}:${random.pick(model.objectIds)}`,
    }
    // One parent per object, as in a hierarchy (loops included): with several, the paths a check
    // explores, on both sides, grow exponentially with the tuples.
    if (relation.name === TUPLESET && withParent.has(tuple.object)) continue
    if (isImplicit(tuple)) continue
    if (relation.name === TUPLESET) withParent.add(tuple.object)
    tuples.set(`${tuple.user} ${tuple.relation} ${tuple.object}`, tuple)
  }
  return [...tuples.values()]
}

/**
 * `count` tuples that may or may not be valid: any subject of the check universe (or the userset the
 * tuple's own object defines) on any relation of any object, to compare which writes are refused.
 */
export function probeTuples(model: GeneratedModel, random: Random, count: number): TupleKey[] {
  const subjects = subjectUniverse(model)
  const relations = model.types.flatMap((type) =>
    type.relations.map((relation) => ({ type: type.name, relation: relation.name })),
  )
  if (relations.length === 0) return []
  return Array.from({ length: count }, () => {
    const { type, relation } = random.pick(relations)
    const object = `${type}:${random.pick(model.objectIds)}`
    const user = random.chance(0.2) ? `${object}#${relation}` : random.pick(subjects)
    return { user, relation, object }
  })
}

/**
 * Every check over the model's bounded universe: each object (every id of every object type) and
 * relation, asked for each user (every id of every user type and its wildcard), each object that
 * can be a subject, and each userset a type restriction names (every id).
 */
export function checkUniverse(model: GeneratedModel): CheckRequest[] {
  const users = subjectUniverse(model)
  const checks: CheckRequest[] = []
  for (const type of model.types) {
    for (const relation of type.relations) {
      for (const id of model.objectIds) {
        for (const user of users) checks.push({ user, relation: relation.name, object: `${type.name}:${id}` })
      }
    }
  }
  return checks
}

function subjectUniverse(model: GeneratedModel): string[] {
  const users = new Set<string>()
  for (const [type, ids] of Object.entries(model.userIds)) {
    for (const id of ids) users.add(`${type}:${id}`)
    users.add(`${type}:*`)
  }
  for (const type of model.types) {
    for (const relation of type.relations) {
      for (const r of relation.restrictions) {
        if (isUserType(model, r.type) || r.wildcard) continue
        for (const id of model.objectIds) users.add(`${r.type}:${id}${r.relation ? `#${r.relation}` : ''}`)
      }
    }
  }
  return [...users]
}
