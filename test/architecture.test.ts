import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

// The import graph (issue 14): no cycle, and no arrow from a lower layer to a higher one. Layers,
// lowest first: the foundation files of src/ (configuration, errors, clock, context, principal,
// scopes, events); src/db and src/repositories; the domain (src/services, src/authz, src/mail,
// src/storage); plugins/; routes/; the entry points (src/app.ts, server, dev, cli).

const ROOTS = ['src', 'plugins', 'routes']
const FOUNDATION = [
  'src/config.ts',
  'src/errors.ts',
  'src/clock.ts',
  'src/context.ts',
  'src/principal.ts',
  'src/scopes.ts',
  'src/events.ts',
  'src/logger.ts',
  'src/dev-secret.ts',
]
const ENTRY = [
  'src/app.ts',
  'src/server.ts',
  'src/dev.ts',
  'src/cli.ts',
  'src/dev-seed.ts',
  'src/lifecycle.ts',
]

function layer(file: string): number {
  if (FOUNDATION.includes(file)) return 0
  if (file.startsWith('src/db/') || file.startsWith('src/repositories/')) return 1
  if (/^src\/(services|authz|mail|storage|outbox)\//.test(file)) return 2
  if (file.startsWith('plugins/')) return 3
  if (file.startsWith('routes/')) return 4
  if (ENTRY.includes(file)) return 5
  throw new Error(`${file} belongs to no layer: add it to test/architecture.test.ts`)
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(file)
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [file] : []
  })
}

/** Each file's relative imports (type imports included: they are arrows all the same). */
function graph(): Map<string, string[]> {
  const edges = new Map<string, string[]>()
  for (const file of ROOTS.flatMap(sources)) {
    const text = readFileSync(file, 'utf8')
    const targets = [
      ...text.matchAll(/^(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'|import\('(\.[^']+)'\)/gm),
    ].map((match) => path.normalize(path.join(path.dirname(file), (match[1] ?? match[2]) as string)))
    edges.set(file, targets)
  }
  return edges
}

describe('the import graph', () => {
  const edges = graph()

  it('has no cycle', () => {
    const cycles: string[] = []
    const state = new Map<string, 'open' | 'done'>()
    const stack: string[] = []
    const visit = (file: string) => {
      state.set(file, 'open')
      stack.push(file)
      for (const target of edges.get(file) ?? []) {
        if (state.get(target) === 'open')
          cycles.push([...stack.slice(stack.indexOf(target)), target].join(' -> '))
        else if (!state.has(target)) visit(target)
      }
      stack.pop()
      state.set(file, 'done')
    }
    for (const file of edges.keys()) if (!state.has(file)) visit(file)
    expect(cycles).toEqual([])
  })

  it('has no arrow from a lower layer to a higher one', () => {
    const upward: string[] = []
    for (const [file, targets] of edges) {
      for (const target of targets) {
        if (edges.has(target) && layer(target) > layer(file)) upward.push(`${file} -> ${target}`)
      }
    }
    expect(upward).toEqual([])
  })
})
