import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { runWithTenant } from '../src/context.ts'
import type { Executor, Tx } from '../src/db/schema.ts'
import { tenantScope } from '../src/db/tenant-scope.ts'
import { findAccountsOfOrganization } from '../src/features/accounts/index.ts'
import { findFile } from '../src/features/files/repository.ts'
import { listConfigEntries } from '../src/features/organizations/config-repository.ts'
import { purchaseRequestQuery } from '../src/features/purchase-requests/repository.ts'

// Every statement on a tenant-owned table names the tenant's organization, taken from a TenantScope
// (src/db/tenant-scope.ts), whatever the authorization tuples say: a tuple written by mistake must
// not turn into a read of another organization's rows. The types make a bare organization id fail
// to compile where a scope is expected; this reads the source of src/ and fails on a query of a
// tenant table whose statement has no `organization_id` condition on a scope, so that a new query
// cannot leave the scope out either. test/tenant-isolation.wrong-tuple.test.ts shows the effect.

/** Tables of an organization's data: every statement on them is limited to the tenant's organization. */
const TENANT_TABLES = [
  'purchase_requests',
  'purchase_request_events',
  'files',
  'organization_config',
  'audit_events',
  'webhook_endpoints',
  'webhook_attempts',
  'api_keys',
]

/** Tables with an organization column that are not read on behalf of a tenant, and why. */
const NOT_TENANT_READS: Record<string, string> = {
  accounts:
    'identities: found by the principal’s own id or email (sign-in, reset, second factor); reads and ' +
    'changes on behalf of a tenant (administration, display names) take a TenantScope',
  sessions: "a principal's own sessions, found from its token",
  passkeys: "a user's own passkeys, found from the principal, or by credential id when signing in",
  mail_outbox:
    "the mail worker's queue, which spans organizations; an organization's status (src/outbox/status.ts) takes a TenantScope",
  webhook_outbox:
    "the webhook worker's queue, which spans organizations; an organization's status (src/outbox/status.ts) takes a TenantScope",
  federated_identities:
    'identities: found by (issuer, subject) when a provider signs someone in, or as the principal’s own linked identities',
  sso_connections:
    "found by the flow's provider reference when a connection signs someone in; the admin routes filter by the caller's organization",
  sso_domains:
    "identity-first sign-in finds a domain's organization across organizations, by design; the admin routes filter by the caller's organization",
}

/** Functions that query a tenant table across organizations on purpose, and why. */
const CROSS_TENANT: Record<string, string> = {
  'src/audit/repository.ts#eventInsertion':
    'the audit trail writes an event of the organization the recorded change belongs to, from any context',
  'src/audit/repository.ts#unchainedEvents':
    'the chainer reads the unchained events of one chain (an organization’s or the system’s) by its name',
  'src/audit/repository.ts#linkEvents':
    'the chainer gives the events of one chain (an organization’s or the system’s) their places, by its name',
  'src/audit/repository.ts#chainsWithUnchained':
    'the chainer’s sweep finds every chain with events not chained yet, whatever their organization',
  'src/audit/repository.ts#hasUnchained': 'the chainer looks for unchained events of one chain by its name',
  'src/audit/repository.ts#countUnchained':
    'audit verify names how many events of one chain wait to be chained',
  'src/audit/repository.ts#deleteOldEvents':
    "the audit_events retention rule sweeps every organization's chain",
  'src/audit/repository.ts#chainEvents':
    'audit verify, an operator’s command, walks one chain (an organization’s or the system’s) by its name',
  'src/features/files/repository.ts#findUnfinishedFiles':
    "the files retention rule sweeps every organization's unfinished uploads",
  'src/features/files/repository.ts#deleteUnfinishedFiles':
    "the files retention rule sweeps every organization's unfinished uploads",
  'src/features/webhooks/fan-out.ts#webhookFanOut':
    'queues messages for the endpoints of the organizations the chained audit events belong to',
  'src/features/webhooks/repository.ts#endpointsByIds':
    'the webhook worker loads the endpoints of the messages it claimed, whatever their organization',
  'src/features/webhooks/repository.ts#lockEndpointState':
    'the webhook worker reads the failure state of the endpoint a claimed message goes to',
  'src/features/webhooks/repository.ts#recordAttempt':
    'the webhook worker records an attempt of a claimed message for its endpoint and organization',
  'src/features/webhooks/repository.ts#deleteOldDeliveries':
    "the webhook_deliveries retention rule sweeps every organization's delivery attempts",
  'src/features/machine-principals/repository.ts#findApiKeyByHash':
    'authentication finds a presented key by its hash, before any organization is known',
  'src/features/machine-principals/repository.ts#findApiKey':
    'a key principal re-checked by its own id, and an operator’s revoke by id (the CLI), which then revokes in the key’s organization',
  'src/features/machine-principals/repository.ts#recordApiKeyUse':
    "the last-use flush writes the batch gathered from every organization's requests",
  'src/features/security-policies/repository.ts#listAllSecurityEntries':
    "each instance reads every organization's security policies at start, before any request names one",
  'src/features/purchase-requests/repository.ts#purchaseRequestExistsOutside':
    "tells another organization's request (403) from an unknown id (404); reads no column of the row",
}

const QUERY_METHODS = new Set([
  'selectFrom',
  'updateTable',
  'deleteFrom',
  'insertInto',
  'innerJoin',
  'leftJoin',
  'rightJoin',
  'fullJoin',
])

interface Query {
  where: string
  table: string
  text: string
}

interface Findings {
  queries: Query[]
  violations: string[]
}

type FunctionNode =
  | ts.FunctionDeclaration
  | ts.MethodDeclaration
  | ts.ArrowFunction
  | ts.FunctionExpression
  | ts.ConstructorDeclaration

const isFunction = (node: ts.Node): node is FunctionNode =>
  ts.isFunctionDeclaration(node) ||
  ts.isMethodDeclaration(node) ||
  ts.isArrowFunction(node) ||
  ts.isFunctionExpression(node) ||
  ts.isConstructorDeclaration(node)

/** The outermost function around `node` that has a name (a declaration, a method, a const arrow). */
function namedFunctionOf(node: ts.Node): { fn: FunctionNode; name: string } | null {
  let found: { fn: FunctionNode; name: string } | null = null
  for (let current: ts.Node | undefined = node.parent; current; current = current.parent) {
    if (!isFunction(current)) continue
    if ((ts.isFunctionDeclaration(current) || ts.isMethodDeclaration(current)) && current.name) {
      found = { fn: current, name: current.name.getText() }
    } else if (ts.isVariableDeclaration(current.parent)) {
      found = { fn: current, name: current.parent.name.getText() }
    }
  }
  return found
}

/** The parameters of `fn` whose declared type names TenantScope. */
function scopeParameters(fn: FunctionNode): string[] {
  return fn.parameters
    .filter((parameter) => parameter.type?.getText().includes('TenantScope'))
    .map((parameter) => parameter.name.getText())
}

/** The whole method chain `node` is part of (`db.selectFrom(...).where(...)...`). */
function chainOf(node: ts.Node): ts.Node {
  let current = node
  while (
    (ts.isPropertyAccessExpression(current.parent) && current.parent.expression === current) ||
    (ts.isCallExpression(current.parent) && current.parent.expression === current)
  ) {
    current = current.parent
  }
  return current
}

const asPattern = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/** Whether the statement's text limits it to the organization of one of the scopes. */
function scopedBy(text: string, scopes: string[]): boolean {
  return scopes.some((scope) =>
    new RegExp(
      `organization_id['"]?\\s*(?::|,\\s*'[^']+'\\s*,|=\\s*\\$\\{)\\s*${asPattern(scope)}\\.organizationId`,
    ).test(text),
  )
}

/** The queries of tenant tables in one source file and what is wrong with them. */
function inspect(file: string, source: string): Findings {
  const sourceFile = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS)
  const findings: Findings = { queries: [], violations: [] }
  const check = (node: ts.Node, table: string, statement: ts.Node) => {
    const owner = namedFunctionOf(node)
    const where = `${file}#${owner?.name ?? '(top level)'}`
    const text = statement.getText()
    findings.queries.push({ where, table, text })
    if (where in CROSS_TENANT) return
    const scopes = owner ? scopeParameters(owner.fn) : []
    if (scopes.length === 0) findings.violations.push(`${where}: a query of ${table} without a TenantScope`)
    else if (!scopedBy(text, scopes))
      findings.violations.push(`${where}: a query of ${table} without organization_id = ${scopes[0]}`)
  }
  const visit = (node: ts.Node) => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      QUERY_METHODS.has(node.expression.name.text)
    ) {
      const [first] = node.arguments
      if (first && ts.isStringLiteralLike(first)) {
        const table = first.text.split(/\s+as\s+/)[0]?.trim() ?? ''
        if (TENANT_TABLES.includes(table)) check(node, table, chainOf(node))
      }
    }
    if (ts.isTaggedTemplateExpression(node) && node.tag.getText() === 'sql') {
      const text = node.template.getText()
      for (const table of TENANT_TABLES) {
        if (new RegExp(`\\b(from|join|update|into)\\s+"?${table}\\b`, 'i').test(text))
          check(node, table, node)
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(sourceFile)
  // A function that takes a scope uses it or hands it on, so a scope cannot be taken and ignored.
  const visitScoped = (node: ts.Node) => {
    if (isFunction(node)) {
      for (const scope of scopeParameters(node)) {
        const body = node.body?.getText() ?? ''
        const handedOn = new RegExp(`[(,]\\s*${asPattern(scope)}\\s*[,)]`).test(body)
        if (!body.includes(`${scope}.organizationId`) && !handedOn) {
          findings.violations.push(`${file}#${namedFunctionOf(node.body ?? node)?.name}: ${scope} unused`)
        }
      }
    }
    ts.forEachChild(node, visitScoped)
  }
  visitScoped(sourceFile)
  return findings
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(file)
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [file] : []
  })
}

/**
 * The tables of `Database` whose row type has an organization_id column: those of src/db/schema.ts
 * and those a feature adds to it (`declare module '…/db/schema.ts' { interface Database … }`).
 */
function tablesWithOrganization(): string[] {
  const interfaces = new Map<string, ts.InterfaceDeclaration>()
  const databases: ts.InterfaceDeclaration[] = []
  const collect = (statements: ts.NodeArray<ts.Statement>) => {
    for (const statement of statements) {
      if (ts.isInterfaceDeclaration(statement)) {
        if (statement.name.text === 'Database') databases.push(statement)
        else interfaces.set(statement.name.text, statement)
      } else if (ts.isModuleDeclaration(statement) && statement.body && ts.isModuleBlock(statement.body)) {
        collect(statement.body.statements)
      }
    }
  }
  for (const file of sources('src'))
    collect(ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true).statements)
  if (databases.length === 0) throw new Error('no Database interface in src/')
  return databases.flatMap((database) =>
    database.members.flatMap((member) => {
      if (!ts.isPropertySignature(member) || !member.type) return []
      const row = interfaces.get(member.type.getText())
      const hasOrganization = row?.members.some((column) => column.name?.getText() === 'organization_id')
      return hasOrganization ? [member.name.getText()] : []
    }),
  )
}

describe('queries of tenant tables', () => {
  const all = sources('src').map((file) => inspect(file, readFileSync(file, 'utf8')))
  const queries = all.flatMap((findings) => findings.queries)

  it('name the tenant organization from a TenantScope in every statement', () => {
    expect(all.flatMap((findings) => findings.violations)).toEqual([])
  })

  it('are found in the repositories of every tenant table', () => {
    for (const table of TENANT_TABLES) {
      expect(
        queries.filter((query) => query.table === table && /repository\.ts#/.test(query.where)).length,
        table,
      ).toBeGreaterThan(0)
    }
    for (const where of Object.keys(CROSS_TENANT)) {
      expect(
        queries.some((query) => query.where === where),
        `${where} is listed as cross-tenant`,
      ).toBe(true)
    }
  })

  it('cover every table with an organization column, or say why it is not read for a tenant', () => {
    const unclassified = tablesWithOrganization().filter(
      (table) => !TENANT_TABLES.includes(table) && !(table in NOT_TENANT_READS),
    )
    expect(unclassified).toEqual([])
  })

  it('are refused without the scope, with a scope left out of the statement, or with a bare id', () => {
    const snippet = `
      export function unscoped(db: Executor, id: string) {
        return db.selectFrom('files').selectAll().where('id', '=', id).execute()
      }
      export function bareId(db: Executor, organizationId: string, id: string) {
        return db.selectFrom('files').selectAll().where('organization_id', '=', organizationId).execute()
      }
      export function scopeIgnored(db: Executor, tenant: TenantScope, id: string) {
        return db.updateTable('purchase_requests').set({ title: 'x' }).where('id', '=', id).execute()
      }
      export const raw = (db: Executor, tenant: TenantScope) =>
        sql\`select * from purchase_request_events where id = \${tenant.organizationId}\`.execute(db)
      export const rawScoped = (db: Executor, tenant: TenantScope) =>
        sql\`select id from purchase_request_events where organization_id = \${tenant.organizationId}\`.execute(db)
      export function scoped(db: Executor, tenant: TenantScope, id: string) {
        return db.selectFrom('files as f').selectAll().where('organization_id', '=', tenant.organizationId).where('id', '=', id)
      }
      export function inserted(db: Executor, tenant: TenantScope) {
        return db.insertInto('organization_config').values({ key: 'k', organization_id: tenant.organizationId })
      }`
    const findings = inspect('snippet.ts', snippet)
    expect(findings.queries.map((query) => query.where.split('#')[1])).toEqual([
      'unscoped',
      'bareId',
      'scopeIgnored',
      'raw',
      'rawScoped',
      'scoped',
      'inserted',
    ])
    expect(findings.violations).toEqual([
      'snippet.ts#unscoped: a query of files without a TenantScope',
      'snippet.ts#bareId: a query of files without a TenantScope',
      'snippet.ts#scopeIgnored: a query of purchase_requests without organization_id = tenant',
      'snippet.ts#raw: a query of purchase_request_events without organization_id = tenant',
      'snippet.ts#scopeIgnored: tenant unused',
    ])
  })

  it('take a TenantScope, which neither an organization id nor a look-alike object is (checked by tsc)', () => {
    const compiled = (db: Executor, trx: Tx, organizationId: string) => {
      // @ts-expect-error an organization id is no scope
      findFile(db, organizationId, 'file')
      // @ts-expect-error nor is an object shaped like one: only the tenant context makes a scope
      purchaseRequestQuery(db, { organizationId }, 'request')
      // @ts-expect-error an organization id is no scope
      listConfigEntries(trx, organizationId)
      // @ts-expect-error an organization id is no scope
      findAccountsOfOrganization(db, organizationId, [])
      // Detached work enters the organization it carries and takes the scope there.
      return findFile(db, runWithTenant(organizationId, tenantScope), 'file')
    }
    expect(compiled).toBeTypeOf('function')
  })
})
