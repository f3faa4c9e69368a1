import type { ModelIndex, RelationReference, Userset } from './model.ts'

// The model compiled once for the embedded evaluator: a plan per type#relation whose rewrite refers
// to the plans it draws on, so that a check walks objects rather than looking names up, and keeps
// what it learns per plan (by plan number) rather than under `type:id#relation` strings it builds.

export type PlanNode =
  | { kind: 'direct' }
  | { kind: 'computed'; plan: RelationPlan | undefined }
  | {
      kind: 'parents'
      /** The type's plan of the tupleset relation (its direct tuples are the parents). */
      tupleset: RelationPlan | undefined
      /** By parent type, its plan of the computed relation; a type without it is not followed. */
      computed: ReadonlyMap<string, RelationPlan>
    }
  | { kind: 'union' | 'intersection'; children: PlanNode[] }
  | { kind: 'difference'; base: PlanNode; subtract: PlanNode }

export interface RelationPlan {
  /** Dense, from 0: the index of what a check keeps about this relation. */
  readonly index: number
  readonly type: string
  readonly relation: string
  /** `type#relation`, as ModelIndex.reachableFrom names it. */
  readonly target: string
  /** The directly related user types. */
  readonly types: RelationReference[]
  /** Whether a type restriction names a userset (`[group#member]`): userset tuples are followed. */
  readonly usersets: boolean
  /**
   * By type, then relation, the usersets the type restrictions admit without a condition, to the
   * plan a userset tuple continues with (null: the model lacks that relation). A userset tuple the
   * model does not admit (written under an older model) is ignored, as OpenFGA does.
   */
  readonly usersetPlans: ReadonlyMap<string, ReadonlyMap<string, RelationPlan | null>>
  rewrite: PlanNode
  /** By user type, ModelIndex.recursiveFastPath (computed when first asked). */
  readonly fastPath: Map<string, boolean>
}

export interface RelationPlans {
  readonly count: number
  /** By type, then relation. */
  readonly byType: ReadonlyMap<string, ReadonlyMap<string, RelationPlan>>
}

export function compileRelationPlans(model: ModelIndex): RelationPlans {
  const byType = new Map<string, Map<string, RelationPlan>>()
  let count = 0
  const rewrites: Array<[RelationPlan, Userset]> = []
  for (const definition of model.model.type_definitions) {
    const plans = new Map<string, RelationPlan>()
    byType.set(definition.type, plans)
    for (const [relation, rewrite] of Object.entries(definition.relations ?? {})) {
      const types = model.directlyRelated(definition.type, relation)
      const plan: RelationPlan = {
        index: count++,
        type: definition.type,
        relation,
        target: `${definition.type}#${relation}`,
        types,
        usersets: types.some((ref) => Boolean(ref.relation)),
        usersetPlans: new Map(),
        rewrite: { kind: 'direct' },
        fastPath: new Map(),
      }
      plans.set(relation, plan)
      rewrites.push([plan, rewrite])
    }
  }
  const planOf = (type: string, relation: string) => byType.get(type)?.get(relation)
  const compile = (type: string, userset: Userset): PlanNode => {
    if ('this' in userset) return { kind: 'direct' }
    if ('computedUserset' in userset)
      return { kind: 'computed', plan: planOf(type, userset.computedUserset.relation) }
    if ('tupleToUserset' in userset) {
      const { tupleset, computedUserset } = userset.tupleToUserset
      const computed = new Map<string, RelationPlan>()
      for (const ref of model.directlyRelated(type, tupleset.relation)) {
        // A parent is an object the tupleset relation admits as such (no userset, wildcard or condition).
        if (ref.condition || ref.relation || ref.wildcard !== undefined) continue
        const plan = planOf(ref.type, computedUserset.relation)
        if (plan) computed.set(ref.type, plan)
      }
      return { kind: 'parents', tupleset: planOf(type, tupleset.relation), computed }
    }
    if ('union' in userset)
      return { kind: 'union', children: userset.union.child.map((child) => compile(type, child)) }
    if ('intersection' in userset) {
      return {
        kind: 'intersection',
        children: userset.intersection.child.map((child) => compile(type, child)),
      }
    }
    return {
      kind: 'difference',
      base: compile(type, userset.difference.base),
      subtract: compile(type, userset.difference.subtract),
    }
  }
  for (const [plan, rewrite] of rewrites) {
    plan.rewrite = compile(plan.type, rewrite)
    const usersetPlans = plan.usersetPlans as Map<string, Map<string, RelationPlan | null>>
    for (const ref of plan.types) {
      if (!ref.relation || ref.condition) continue
      let relations = usersetPlans.get(ref.type)
      if (!relations) {
        relations = new Map()
        usersetPlans.set(ref.type, relations)
      }
      relations.set(ref.relation, planOf(ref.type, ref.relation) ?? null)
    }
  }
  return { count, byType }
}
