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
