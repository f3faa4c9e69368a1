import type { AuthorizationModel, RelationReference, Userset } from '../../src/authz/model.ts'
import type { CheckRequest, TupleKey } from '../../src/authz/port.ts'

// The answers OpenFGA's general check resolution (its LocalChecker without the fast paths, v1.10.2)
// can give, computed in memory, for the differential test to tell an answer that depends on the
// order in which OpenFGA's concurrent branches finish from a wrong one. Written apart from the
// embedded evaluator, from OpenFGA's code:
//
// - a check of object#relation for a user fails past 25 nested dispatches (userset and
//   tuple-to-userset steps; a computed userset is no dispatch); one already on the path is a cycle:
//   false, with "cycle detected"; a userset contains itself; without a path from the user's type to
//   the relation in the model, false without reading tuples;
// - direct tuples, the wildcard of the user's type, and one dispatch per userset tuple and per
//   parent, all as a union: allowed if any is; otherwise an error if any failed; otherwise false,
//   with "cycle detected" if any met one;
// - an intersection answers with the first branch to come back false (or with a cycle), and an
//   exclusion with the first of: its base false (or with a cycle), its subtraction allowed (false)
//   or with a cycle: which comes first is a race, so every order is considered.

/** allowed, denied, denied with "cycle detected", error (resolution too complex). */
type Response = 'T' | 'F' | 'C' | 'E'

export type GeneralAnswer = 'allowed' | 'denied' | 'too complex'

const MAX_DEPTH = 25

const unionOf = (sets: Array<Set<Response>>): Set<Response> => {
  const result = new Set<Response>()
  const all = (test: (set: Set<Response>) => boolean) => sets.every(test)
  const any = (value: Response) => sets.some((set) => set.has(value))
  const without = (set: Set<Response>, ...values: Response[]) => [...set].filter((v) => !values.includes(v))
  if (any('T')) result.add('T')
  if (all((set) => without(set, 'T').length > 0) && any('E')) result.add('E')
  if (all((set) => without(set, 'T', 'E').length > 0) && any('C')) result.add('C')
  if (all((set) => set.has('F'))) result.add('F')
  return result
}

const intersectionOf = (sets: Array<Set<Response>>): Set<Response> => {
  const result = new Set<Response>()
  if (sets.length === 0) return new Set(['F'])
  for (const set of sets) for (const value of set) if (value === 'F' || value === 'C') result.add(value)
  if (sets.every((set) => set.has('T'))) result.add('T')
  if (sets.every((set) => set.has('T') || set.has('E')) && sets.some((set) => set.has('E'))) result.add('E')
  return result
}

/** OpenFGA's exclusion loop for one pair of answers, base first or subtraction first. */
function exclusion(base: Response, subtract: Response, baseFirst: boolean): Response {
  let failed = false
  for (const which of baseFirst ? ['base', 'subtract'] : ['subtract', 'base']) {
    const value = which === 'base' ? base : subtract
    if (value === 'E') {
      failed = true
      continue
    }
    if (value === 'C') return 'C'
    if (which === 'base' && value === 'F') return 'F'
    if (which === 'subtract' && value === 'T') return 'F'
  }
  return failed ? 'E' : 'T'
}

/**
 * Every answer OpenFGA's general resolution can give to `check` over these tuples, or null when
 * working it out takes more than `budget` resolutions.
 */
export function generalResolutionAnswers(
  model: AuthorizationModel,
  tuples: TupleKey[],
  check: CheckRequest,
  budget = 200_000,
): Set<GeneralAnswer> | null {
  const types = new Map(model.type_definitions.map((t) => [t.type, t]))
  const restrictions = (type: string, relation: string): RelationReference[] =>
    types.get(type)?.metadata?.relations?.[relation]?.directly_related_user_types ?? []
  const hasRelation = (type: string, relation: string) => types.get(type)?.relations?.[relation] !== undefined
  const typeOf = (object: string) => object.slice(0, object.indexOf(':'))
  const split = (user: string) => {
    const hash = user.indexOf('#')
    return hash === -1
      ? { object: user, relation: '' }
      : { object: user.slice(0, hash), relation: user.slice(hash + 1) }
  }

  // The model graph, from what a user can be to the relations it leads to (OpenFGA's PathExists).
  const dependents = new Map<string, Set<string>>()
  const edge = (from: string, to: string) => {
    const set = dependents.get(from) ?? new Set<string>()
    set.add(to)
    dependents.set(from, set)
  }
  for (const definition of model.type_definitions) {
    for (const [relation, rewrite] of Object.entries(definition.relations ?? {})) {
      const target = `${definition.type}#${relation}`
      const walk = (userset: Userset): void => {
        if ('this' in userset) {
          for (const r of restrictions(definition.type, relation)) {
            edge(r.relation ? `${r.type}#${r.relation}` : r.wildcard ? `${r.type}:*` : r.type, target)
          }
        } else if ('computedUserset' in userset) {
          edge(`${definition.type}#${userset.computedUserset.relation}`, target)
        } else if ('tupleToUserset' in userset) {
          const computed = userset.tupleToUserset.computedUserset.relation
          for (const r of restrictions(definition.type, userset.tupleToUserset.tupleset.relation)) {
            if (hasRelation(r.type, computed)) edge(`${r.type}#${computed}`, target)
          }
        } else if ('union' in userset) userset.union.child.forEach(walk)
        else if ('intersection' in userset) userset.intersection.child.forEach(walk)
        else {
          walk(userset.difference.base)
          walk(userset.difference.subtract)
        }
      }
      walk(rewrite)
    }
  }
  const reached = (from: string) => {
    const seen = new Set([from])
    const queue = [from]
    for (let node = queue.pop(); node !== undefined; node = queue.pop()) {
      for (const next of dependents.get(node) ?? []) {
        if (!seen.has(next)) {
          seen.add(next)
          queue.push(next)
        }
      }
    }
    return seen
  }
  const user = check.user
  const { object: userObject, relation: userRelation } = split(user)
  const userType = typeOf(userObject)
  const reachable = userRelation
    ? reached(`${userType}#${userRelation}`)
    : new Set([...reached(userType), ...reached(`${userType}:*`)])

  const stored = new Map<string, TupleKey[]>()
  for (const t of tuples) {
    const key = `${t.object}#${t.relation}`
    stored.set(key, [...(stored.get(key) ?? []), t])
  }
  const admits = (type: string, relation: string, subject: string) => {
    const { object, relation: subjectRelation } = split(subject)
    const subjectType = typeOf(object)
    const wildcard = object.endsWith(':*')
    return restrictions(type, relation).some(
      (r) =>
        r.type === subjectType &&
        (subjectRelation
          ? r.relation === subjectRelation
          : wildcard
            ? r.wildcard !== undefined
            : !r.relation && !r.wildcard),
    )
  }

  let steps = 0
  const resolve = (
    object: string,
    relation: string,
    depth: number,
    visited: ReadonlySet<string>,
  ): Set<Response> => {
    if (++steps > budget) throw new BudgetExceeded()
    if (depth === MAX_DEPTH) return new Set(['E'])
    const key = `${object}#${relation}`
    if (visited.has(key)) return new Set(['C'])
    const path = new Set(visited).add(key)
    if (key === user) return new Set(['T'])
    const type = typeOf(object)
    if (!reachable.has(`${type}#${relation}`)) return new Set(['F'])
    const rewrite = types.get(type)?.relations?.[relation]
    if (!rewrite) return new Set(['F'])
    return evaluate(object, relation, rewrite, depth, path)
  }
  const evaluate = (
    object: string,
    relation: string,
    rewrite: Userset,
    depth: number,
    path: ReadonlySet<string>,
  ): Set<Response> => {
    const type = typeOf(object)
    if ('this' in rewrite) {
      const found = (stored.get(`${object}#${relation}`) ?? []).filter((t) => admits(type, relation, t.user))
      const handlers: Array<Set<Response>> = []
      // The user's own tuple (its type or userset directly related), and its type's wildcard.
      if (admits(type, relation, user))
        handlers.push(new Set([found.some((t) => t.user === user) ? 'T' : 'F']))
      if (!userRelation && admits(type, relation, `${userType}:*`)) {
        handlers.push(new Set([found.some((t) => t.user === `${userType}:*`) ? 'T' : 'F']))
      }
      if (restrictions(type, relation).some((r) => r.relation)) {
        const usersets = found.filter((t) => t.user.includes('#'))
        handlers.push(
          unionOf(
            usersets.map((t) => {
              const { object: o, relation: r } = split(t.user)
              return resolve(o, r, depth + 1, path)
            }),
          ),
        )
      }
      return unionOf(handlers)
    }
    if ('computedUserset' in rewrite) return resolve(object, rewrite.computedUserset.relation, depth, path)
    if ('tupleToUserset' in rewrite) {
      const { tupleset, computedUserset } = rewrite.tupleToUserset
      const parents = (stored.get(`${object}#${tupleset.relation}`) ?? [])
        .filter((t) => admits(type, tupleset.relation, t.user))
        .map((t) => t.user)
        .filter((parent) => hasRelation(typeOf(parent), computedUserset.relation))
      return unionOf(parents.map((parent) => resolve(parent, computedUserset.relation, depth + 1, path)))
    }
    const branch = (child: Userset) => evaluate(object, relation, child, depth, path)
    if ('union' in rewrite) return unionOf(rewrite.union.child.map(branch))
    if ('intersection' in rewrite) return intersectionOf(rewrite.intersection.child.map(branch))
    const bases = branch(rewrite.difference.base)
    const subtracts = branch(rewrite.difference.subtract)
    const result = new Set<Response>()
    for (const base of bases) {
      for (const subtract of subtracts) {
        result.add(exclusion(base, subtract, true))
        result.add(exclusion(base, subtract, false))
      }
    }
    return result
  }

  let responses: Set<Response>
  try {
    // The check itself, at depth 0 with nothing visited.
    responses = resolve(check.object, check.relation, 0, new Set())
  } catch (error) {
    if (error instanceof BudgetExceeded) return null
    throw error
  }
  return new Set(
    [...responses].map((r): GeneralAnswer => (r === 'T' ? 'allowed' : r === 'E' ? 'too complex' : 'denied')),
  )
}

class BudgetExceeded extends Error {}
