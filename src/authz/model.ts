import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { transformer } from '@openfga/syntax-transformer'

// The authorization model (`fga-model.fga`, OpenFGA DSL schema 1.1), parsed at start-up with
// OpenFGA's own syntax transformer into the JSON form OpenFGA's API uses.

export const MODEL_FILE = path.resolve(import.meta.dirname, '../../fga-model.fga')

/** A relation rewrite, as in OpenFGA's JSON model. */
export type Userset =
  | { this: Record<string, never> }
  | { computedUserset: { relation: string } }
  | { tupleToUserset: { tupleset: { relation: string }; computedUserset: { relation: string } } }
  | { union: { child: Userset[] } }
  | { intersection: { child: Userset[] } }
  | { difference: { base: Userset; subtract: Userset } }

export interface RelationReference {
  type: string
  relation?: string
  wildcard?: Record<string, never>
  /** `[user with <condition>]`: only tuples carrying this condition are admitted (OpenFGA ABAC). */
  condition?: string
}

/** A `condition <name>(<parameters>) { <CEL expression> }` block of the model. */
export interface ConditionDefinition {
  name: string
  expression: string
  parameters?: Record<string, { type_name: string; generic_types?: unknown[] }>
}

export interface TypeDefinition {
  type: string
  relations?: Record<string, Userset>
  metadata?: { relations?: Record<string, { directly_related_user_types?: RelationReference[] }> } | null
}

export interface AuthorizationModel {
  schema_version: string
  type_definitions: TypeDefinition[]
  conditions?: Record<string, ConditionDefinition>
}

export function parseModel(dsl: string): AuthorizationModel {
  return transformer.transformDSLToJSONObject(dsl) as unknown as AuthorizationModel
}

export async function loadModel(file = MODEL_FILE): Promise<AuthorizationModel> {
  return parseModel(await readFile(file, 'utf8'))
}

/** Lookup helpers over a parsed model. */
export class ModelIndex {
  readonly model: AuthorizationModel
  readonly #types: Map<string, TypeDefinition>
  /** By node (`user`, `user:*`, `group#member`), the relations whose rewrite draws on it directly. */
  #dependents: Map<string, string[]> | undefined
  readonly #reachable = new Map<string, ReadonlySet<string>>()
  #weightedGraph: boolean | undefined

  constructor(model: AuthorizationModel) {
    this.model = model
    this.#types = new Map(model.type_definitions.map((t) => [t.type, t]))
  }

  hasType(type: string): boolean {
    return this.#types.has(type)
  }

  relation(type: string, relation: string): Userset | undefined {
    return this.#types.get(type)?.relations?.[relation]
  }

  hasRelation(type: string, relation: string): boolean {
    return this.relation(type, relation) !== undefined
  }

  directlyRelated(type: string, relation: string): RelationReference[] {
    return this.#types.get(type)?.metadata?.relations?.[relation]?.directly_related_user_types ?? []
  }

  /**
   * The relations (`type#relation`) that a user can be related to at all through the model, from
   * `from`: a type (`user`), a wildcard (`user:*`) or a userset (`group#member`), itself included.
   * It follows type restrictions, computed usersets and tuple-to-usersets through every operator,
   * as OpenFGA's model graph does (its PathExists, which answers a check false before reading tuples).
   */
  reachableFrom(from: string): ReadonlySet<string> {
    const cached = this.#reachable.get(from)
    if (cached) return cached
    const dependents = this.#dependentsOf()
    const reached = new Set([from])
    const queue = [from]
    for (let node = queue.pop(); node !== undefined; node = queue.pop()) {
      for (const next of dependents.get(node) ?? []) {
        if (reached.has(next)) continue
        reached.add(next)
        queue.push(next)
      }
    }
    this.#reachable.set(from, reached)
    return reached
  }

  #dependentsOf(): Map<string, string[]> {
    if (this.#dependents) return this.#dependents
    const dependents = new Map<string, string[]>()
    const add = (from: string, to: string) => {
      const list = dependents.get(from)
      if (!list) dependents.set(from, [to])
      else if (!list.includes(to)) list.push(to)
    }
    for (const definition of this.model.type_definitions) {
      const type = definition.type
      for (const [relation, rewrite] of Object.entries(definition.relations ?? {})) {
        const target = `${type}#${relation}`
        const visit = (userset: Userset): void => {
          if ('this' in userset) {
            for (const ref of this.directlyRelated(type, relation)) {
              add(
                ref.relation ? `${ref.type}#${ref.relation}` : ref.wildcard ? `${ref.type}:*` : ref.type,
                target,
              )
            }
          } else if ('computedUserset' in userset) {
            add(`${type}#${userset.computedUserset.relation}`, target)
          } else if ('tupleToUserset' in userset) {
            const computed = userset.tupleToUserset.computedUserset.relation
            for (const parent of this.directlyRelated(type, userset.tupleToUserset.tupleset.relation)) {
              if (this.hasRelation(parent.type, computed)) add(`${parent.type}#${computed}`, target)
            }
          } else if ('union' in userset) {
            userset.union.child.forEach(visit)
          } else if ('intersection' in userset) {
            userset.intersection.child.forEach(visit)
          } else {
            visit(userset.difference.base)
            visit(userset.difference.subtract)
          }
        }
        visit(rewrite)
      }
    }
    this.#dependents = dependents
    return dependents
  }

  /**
   * Whether OpenFGA resolves `type#relation` for users of `userType` (not usersets) with one of its
   * recursive fast paths, which answer without "cycle detected": for a relation that recurses on
   * itself alone, `[user, group#member]` in group#member or `[user] or viewer from parent` (parent
   * `[folder]`) in folder#viewer, the user's type among its type restrictions. It takes them only
   * when it can build its weighted graph of the model (see #buildsWeightedGraph). Recognises these
   * two forms only: for any other, the answer is the general resolution's, as OpenFGA's for a
   * userset, a model it cannot weigh, or a relation with more to it.
   */
  recursiveFastPath(type: string, relation: string, userType: string): boolean {
    const rewrite = this.relation(type, relation)
    if (!rewrite) return false
    const restrictions = this.directlyRelated(type, relation)
    const recursive = (ref: RelationReference) => ref.type === type && ref.relation === relation
    // Besides the recursion, only types and wildcards, the user's among them (a weight of 1 in OpenFGA's terms).
    const others = restrictions.filter((ref) => !recursive(ref))
    if (others.some((ref) => ref.relation) || !others.some((ref) => ref.type === userType)) return false
    let recurses = false
    if ('this' in rewrite) {
      recurses = restrictions.some(recursive)
    } else if ('union' in rewrite && rewrite.union.child.length === 2 && !restrictions.some(recursive)) {
      const direct = rewrite.union.child.find((child) => 'this' in child)
      const ttu = rewrite.union.child.find((child) => 'tupleToUserset' in child)
      if (
        direct &&
        ttu &&
        'tupleToUserset' in ttu &&
        ttu.tupleToUserset.computedUserset.relation === relation
      ) {
        const parents = this.directlyRelated(type, ttu.tupleToUserset.tupleset.relation)
        recurses =
          parents.length > 0 && parents.every((ref) => ref.type === type && !ref.relation && !ref.wildcard)
      }
    }
    return recurses && this.#buildsWeightedGraph()
  }

  /**
   * Whether OpenFGA (language v0.2, as in OpenFGA 1.10) builds its weighted graph of the model,
   * without which it takes no fast path: it fails when a tuple-to-userset names a relation one of
   * the parent types lacks, when an intersection or exclusion lies on a cycle of the model, and when
   * the branches of an intersection have no user type in common.
   */
  #buildsWeightedGraph(): boolean {
    if (this.#weightedGraph !== undefined) return this.#weightedGraph
    // The model as a graph: each relation, and each operator where it occurs, to what it draws on.
    type Edge = { to: Node | string; direct: boolean }
    type Node = { edges: Edge[]; operator?: 'union' | 'intersection' | 'exclusion' }
    const relations = new Map<string, Node>()
    const operators: Node[] = []
    let builds = true
    const leaves = (type: string, relation: string, userset: Userset): Edge[] => {
      if ('this' in userset) {
        return this.directlyRelated(type, relation).map((ref) => ({
          to: ref.relation ? `${ref.type}#${ref.relation}` : ref.type,
          direct: true,
        }))
      }
      if ('computedUserset' in userset)
        return [{ to: `${type}#${userset.computedUserset.relation}`, direct: false }]
      if ('tupleToUserset' in userset) {
        const computed = userset.tupleToUserset.computedUserset.relation
        const parents = [
          ...new Set(this.directlyRelated(type, userset.tupleToUserset.tupleset.relation).map((r) => r.type)),
        ]
        if (parents.some((parent) => !this.hasRelation(parent, computed))) builds = false
        return parents.map((parent) => ({ to: `${parent}#${computed}`, direct: false }))
      }
      return []
    }
    const build = (type: string, relation: string, userset: Userset, into: Node): void => {
      const children =
        'union' in userset
          ? userset.union.child
          : 'intersection' in userset
            ? userset.intersection.child
            : 'difference' in userset
              ? [userset.difference.base, userset.difference.subtract]
              : undefined
      if (!children) {
        into.edges.push(...leaves(type, relation, userset))
        return
      }
      const operator: Node = {
        edges: [],
        operator: 'union' in userset ? 'union' : 'intersection' in userset ? 'intersection' : 'exclusion',
      }
      operators.push(operator)
      into.edges.push({ to: operator, direct: false })
      for (const child of children) build(type, relation, child, operator)
    }
    for (const definition of this.model.type_definitions) {
      for (const [relation, rewrite] of Object.entries(definition.relations ?? {})) {
        const node: Node = { edges: [] }
        relations.set(`${definition.type}#${relation}`, node)
        build(definition.type, relation, rewrite, node)
      }
    }
    const resolve = (edge: Edge): Node | undefined =>
      typeof edge.to === 'string' ? relations.get(edge.to) : edge.to
    // An intersection or exclusion on a cycle.
    for (const operator of operators) {
      if (operator.operator === 'union' || !builds) continue
      const seen = new Set<Node>()
      const queue = operator.edges.map(resolve).filter((n): n is Node => n !== undefined)
      for (let node = queue.pop(); node !== undefined; node = queue.pop()) {
        if (node === operator) builds = false
        if (seen.has(node)) continue
        seen.add(node)
        for (const edge of node.edges) {
          const next = resolve(edge)
          if (next) queue.push(next)
        }
      }
    }
    // The user types that reach each node, to a fixpoint; an intersection keeps those its rewritten
    // branches share (a branch that has none left takes the next one's, as OpenFGA's does) and, when
    // it has type restrictions, those among them; an exclusion those of all its edges but the last.
    const keys = new Map<Node, Set<string>>()
    const keysOf = (edge: Edge): Set<string> => {
      const node = resolve(edge)
      return node ? (keys.get(node) ?? new Set()) : new Set([edge.to as string])
    }
    const all = [...relations.values(), ...operators]
    for (let changed = true, round = 0; changed && round < 100; round++) {
      changed = false
      for (const node of all) {
        let next: Set<string>
        if (node.operator === 'intersection') {
          let rewritten = new Set<string>()
          for (const edge of node.edges) {
            if (edge.direct) continue
            const edgeKeys = keysOf(edge)
            rewritten =
              rewritten.size === 0
                ? new Set(edgeKeys)
                : new Set([...rewritten].filter((k) => edgeKeys.has(k)))
          }
          const directKeys = new Set(
            node.edges.filter((edge) => edge.direct).flatMap((edge) => [...keysOf(edge)]),
          )
          next = directKeys.size > 0 ? new Set([...directKeys].filter((k) => rewritten.has(k))) : rewritten
        } else {
          const edges = node.operator === 'exclusion' ? node.edges.slice(0, -1) : node.edges
          next = new Set(edges.flatMap((edge) => [...keysOf(edge)]))
        }
        const before = keys.get(node)
        if (!before || before.size !== next.size || [...next].some((k) => !before.has(k))) {
          keys.set(node, next)
          changed = true
        }
      }
    }
    if (operators.some((node) => node.operator === 'intersection' && (keys.get(node)?.size ?? 0) === 0)) {
      builds = false
    }
    this.#weightedGraph = builds
    return builds
  }

  /** The conditions the model defines or names in a type restriction, with the relations naming each. */
  conditions(): Array<{ name: string; usedBy: string[] }> {
    const uses = new Map<string, string[]>(Object.keys(this.model.conditions ?? {}).map((name) => [name, []]))
    for (const definition of this.model.type_definitions) {
      for (const [relation, metadata] of Object.entries(definition.metadata?.relations ?? {})) {
        for (const ref of metadata.directly_related_user_types ?? []) {
          if (!ref.condition) continue
          const usedBy = uses.get(ref.condition) ?? []
          const where = `${definition.type}#${relation}`
          if (!usedBy.includes(where)) usedBy.push(where)
          uses.set(ref.condition, usedBy)
        }
      }
    }
    return [...uses].sort(([a], [b]) => a.localeCompare(b)).map(([name, usedBy]) => ({ name, usedBy }))
  }
}
