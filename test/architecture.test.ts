import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

// The import graph of src/: no cycle, and the rooms' rules (README, Map). Rooms:
// - the foundation files at the top of src/ (configuration, errors, clock, context, principal, ...);
// - the infrastructure rooms (db, authz, mail, storage, outbox, http, security, housekeeping, audit), which
//   never import a feature;
// - one folder per feature under src/features/, whose files import the foundation, infrastructure,
//   their own folder, and another feature only through its public file (`index.ts`); of src/http/,
//   only a feature's route files (`routes.ts`, `*-routes.ts`) import, and only the files a route's
//   config and handler are written with (ROUTE_HTTP_FILES): a service or repository is handed what
//   it needs of HTTP as a port;
// - the composition root (the files directly in src/features/), which builds the features' services
//   from their public files;
// - the entry points (src/app.ts, server, dev, cli), which may import any room's public face.

const ENTRY = [
  'src/app.ts',
  'src/server.ts',
  'src/dev.ts',
  'src/cli.ts',
  'src/dev-seed.ts',
  'src/lifecycle.ts',
]
const INFRASTRUCTURE = [
  'db',
  'authz',
  'mail',
  'storage',
  'outbox',
  'http',
  'security',
  'housekeeping',
  'audit',
]

/** The src/http/ files a feature's route files may import: what a route's config and handler use. */
const ROUTE_HTTP_FILES = [
  'src/http/rate-limit.ts', // `rateLimit` rules and the refresh's `statementLimits`
  'src/http/idempotency.ts', // `idempotentCreate`, for routes marked `idempotent`
  'src/http/impersonation.ts', // `refuseWhileImpersonating`, for a feature's credentials or administration
]

type Room =
  | { kind: 'foundation' | 'composition' | 'entry' }
  | { kind: 'infrastructure' | 'feature'; name: string }

function roomOf(file: string): Room {
  if (ENTRY.includes(file)) return { kind: 'entry' }
  const parts = file.split('/')
  if (parts.length === 2) return { kind: 'foundation' }
  if (parts[1] === 'features') {
    if (parts.length === 3) return { kind: 'composition' }
    return { kind: 'feature', name: parts[2] as string }
  }
  if (INFRASTRUCTURE.includes(parts[1] as string)) return { kind: 'infrastructure', name: parts[1] as string }
  throw new Error(`${file} is in no room: add its folder to test/architecture.test.ts`)
}

const isPublicFile = (file: string) => /^src\/features\/[^/]+\/index\.ts$/.test(file)
const isRouteFile = (file: string) => /^src\/features\/[^/]+\/(?:[^/]+-)?routes\.ts$/.test(file)

/** Why `file` may not import `target`, or null when it may. */
function violation(file: string, target: string): string | null {
  const from = roomOf(file)
  const to = roomOf(target)
  if (to.kind === 'entry') return from.kind === 'entry' ? null : 'only an entry point imports an entry point'
  if (to.kind === 'composition')
    return from.kind === 'entry' || from.kind === 'composition'
      ? null
      : 'only entry points build the services'
  if (from.kind === 'foundation' && to.kind !== 'foundation')
    return 'the foundation imports only the foundation'
  if (from.kind === 'infrastructure' && to.kind === 'feature') return 'infrastructure never imports a feature'
  if (from.kind === 'feature' && to.kind === 'infrastructure' && to.name === 'http') {
    if (!isRouteFile(file)) return 'only route files import src/http/: a service or repository gets a port'
    return ROUTE_HTTP_FILES.includes(target)
      ? null
      : `a route file imports only ${ROUTE_HTTP_FILES.join(', ')}`
  }
  if (to.kind === 'feature') {
    if (from.kind === 'feature' && from.name === to.name) return null
    return isPublicFile(target) ? null : `another room imports a feature only through its index.ts`
  }
  return null
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
  for (const file of sources('src')) {
    const text = readFileSync(file, 'utf8')
    const targets = [
      ...text.matchAll(/^(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'|import\('(\.[^']+)'\)/gm),
    ].map((match) => path.normalize(path.join(path.dirname(file), (match[1] ?? match[2]) as string)))
    edges.set(
      file,
      targets.filter((target) => target.startsWith('src/')),
    )
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

  it('keeps every import within the rules of its room', () => {
    const broken: string[] = []
    for (const [file, targets] of edges) {
      for (const target of targets) {
        const why = violation(file, target)
        if (why) broken.push(`${file} -> ${target}: ${why}`)
      }
    }
    expect(broken).toEqual([])
  })

  it('puts every feature in a folder with a public index.ts', () => {
    const features = readdirSync('src/features', { withFileTypes: true }).filter((entry) =>
      entry.isDirectory(),
    )
    expect(features.length).toBeGreaterThan(0)
    for (const feature of features)
      expect(sources(`src/features/${feature.name}`)).toContain(`src/features/${feature.name}/index.ts`)
  })

  it('refuses the imports the rules forbid', () => {
    expect(violation('src/http/auth.ts', 'src/features/sessions/service.ts')).toMatch(/infrastructure/)
    expect(violation('src/features/files/service.ts', 'src/features/accounts/repository.ts')).toMatch(/index/)
    expect(violation('src/features/files/service.ts', 'src/features/accounts/index.ts')).toBeNull()
    expect(violation('src/config.ts', 'src/db/database.ts')).toMatch(/foundation/)
    expect(violation('src/features/files/service.ts', 'src/features/compose.ts')).toMatch(/entry/)
    expect(violation('src/features/sessions/service.ts', 'src/http/rate-limit.ts')).toMatch(/route files/)
    expect(violation('src/features/sessions/repository.ts', 'src/http/rate-limit-store.ts')).toMatch(
      /route files/,
    )
    expect(violation('src/features/sessions/routes.ts', 'src/http/rate-limit.ts')).toBeNull()
    expect(violation('src/features/accounts/user-routes.ts', 'src/http/idempotency.ts')).toBeNull()
    expect(violation('src/features/files/routes.ts', 'src/http/idempotency-store.ts')).toMatch(/route file/)
    expect(violation('src/features/compose.ts', 'src/http/idempotency-store.ts')).toBeNull()
  })
})
