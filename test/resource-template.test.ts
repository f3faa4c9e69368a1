import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rename, renames } from '../scripts/new-resource.ts'
import { ROOT } from './helpers/process.ts'

// The purchase-request folder is the template a team copies for its own resource (docs/guide.md,
// "Adding a resource"). This builds a second resource, invoices, with `npm run resource:new` in a
// copy of the project, type-checks the copy and runs the new routes in a process of their own beside
// the template's, so neither the template nor the guide's steps can rot unseen.

const run = promisify(execFile)

interface Outcome {
  created: { status: number; location?: string; body: { id: string; status: string; title: string } }
  read: number
  listed: string[]
  submitted: string
  approved: string
  history: string[]
  otherOrganization: number
  unauthenticated: number
  purchaseRequest: number
  documentPaths: string[]
  approvalMail: { template: string; subject: string } | null
  scopes: string[]
}

// Runs in the copy: the app built as the service builds it, on an in-memory PGlite.
const SCENARIO = `
import { randomBytes } from 'node:crypto'
import { buildApp } from './src/app.ts'
import { loadConfig } from './src/config.ts'
import { openPGlite } from './src/db/database.ts'
import { migrateToLatest } from './src/db/migrator.ts'
import { createOrganization } from './src/features/organizations/index.ts'
import { SCOPES } from './src/scopes.ts'

const config = loadConfig({
  'platform.profile': 'test',
  'platform.auth.jwt.secret': randomBytes(32).toString('base64'),
  'platform.auth.password.hash-memory-kib': '1024',
  'platform.auth.password.hash-iterations': '1',
  'platform.storage.s3.endpoint': 'http://127.0.0.1:9',
  'platform.web.frontend-url': 'https://app.example.test',
  'platform.docs.enabled': 'true',
})
const database = await openPGlite()
await migrateToLatest(database.db)
const app = await buildApp(config, { database, logLevel: 'silent', startMailWorker: false, startAuthzWorker: false, startHousekeeping: false })
await app.ready()

async function signIn(role) {
  const organizationId = (await createOrganization(app.db, { name: 'Org ' + randomBytes(3).toString('hex') })).id
  const email = role + '-' + randomBytes(4).toString('hex') + '@example.com'
  await app.services.users.create({ organizationId, email, role, password: 'correct horse battery staple' })
  const res = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { username: email, password: 'correct horse battery staple' } })
  const access = res.cookies.find((c) => c.name === 'access_token').value
  return (options) => app.inject({ ...options, cookies: { access_token: access } })
}

const admin = await signIn('admin')
const stranger = await signIn('admin')
const created = await admin({ method: 'POST', url: '/api/invoices', payload: { title: 'Office chairs' } })
const id = created.json().id
const submitted = await admin({ method: 'POST', url: '/api/invoices/' + id + '/submit' })
const approved = await admin({ method: 'POST', url: '/api/invoices/' + id + '/approve' })
const mail = await app.db.selectFrom('mail_outbox').select(['template', 'data', 'organization_id']).where('template', '=', 'invoice_approved').executeTakeFirst()
const rendered = mail ? await app.mail.templates.renderStored(mail.template, { title: 'Office chairs' }, { organizationId: mail.organization_id }) : null
const documentPaths = Object.keys(app.swagger().paths)
const outcome = {
  created: { status: created.statusCode, location: created.headers.location, body: created.json() },
  read: (await admin({ method: 'GET', url: '/api/invoices/' + id })).statusCode,
  listed: (await admin({ method: 'GET', url: '/api/invoices' })).json().items.map((item) => item.id),
  submitted: submitted.json().status,
  approved: approved.json().status,
  history: (await admin({ method: 'GET', url: '/api/invoices/' + id + '/history' })).json().items.map((item) => item.action),
  otherOrganization: (await stranger({ method: 'GET', url: '/api/invoices/' + id })).statusCode,
  unauthenticated: (await app.inject({ method: 'GET', url: '/api/invoices/' + id })).statusCode,
  purchaseRequest: (await admin({ method: 'POST', url: '/api/purchase-requests', payload: { title: 'Desks' } })).statusCode,
  documentPaths: documentPaths.filter((p) => p.startsWith('/api/invoices')),
  approvalMail: mail && rendered ? { template: mail.template, subject: rendered.subject } : null,
  scopes: SCOPES.filter((scope) => scope.startsWith('invoices')),
}
await app.close()
await database.close()
process.stdout.write(JSON.stringify(outcome))
`

describe('a resource built from the purchase-request template', () => {
  let copy: string
  let written: string
  let outcome: Outcome

  beforeAll(async () => {
    copy = await mkdtemp(path.join(tmpdir(), 'resource-template-'))
    for (const entry of ['src', 'migrations', 'scripts', 'fga-model.fga', 'package.json', 'tsconfig.json'])
      await cp(path.join(ROOT, entry), path.join(copy, entry), { recursive: true })
    await symlink(path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules'), 'dir')
    const generated = await run(process.execPath, ['scripts/new-resource.ts', '--name', 'invoice'], {
      cwd: copy,
    })
    written = generated.stdout
    await writeFile(path.join(copy, 'scenario.ts'), SCENARIO)
    const scenario = await run(process.execPath, ['scenario.ts'], { cwd: copy, maxBuffer: 16 * 1024 * 1024 })
    outcome = JSON.parse(scenario.stdout) as Outcome
  }, 120_000)

  afterAll(async () => {
    if (copy) await rm(copy, { recursive: true, force: true })
  })

  it('writes the feature folder, a migration, the model type and the twins of the template lines', async () => {
    expect(written).toContain('src/features/invoices/routes.ts')
    expect(written).toContain('src/features/invoices/tables.ts')
    expect(written).toMatch(/migrations\/\d{4}_invoices\.ts/)
    expect(written).toMatch(/src\/app\.ts \(2 lines\)/)
    expect(written).toMatch(/src\/scopes\.ts \(2 lines\)/)
    const model = await readFile(path.join(copy, 'fga-model.fga'), 'utf8')
    expect(model).toContain('type purchase_request')
    expect(model).toMatch(/type invoice\n\s+relations\n\s+define owner_organization: \[organization\]/)
  })

  it('type-checks with the template and the new resource side by side', async () => {
    const tsc = path.join(ROOT, 'node_modules/typescript/bin/tsc')
    await writeFile(
      path.join(copy, 'tsconfig.check.json'),
      JSON.stringify({ extends: './tsconfig.json', include: ['src', 'migrations', 'scripts'] }),
    )
    const result = await run(process.execPath, [tsc, '--noEmit', '-p', 'tsconfig.check.json'], {
      cwd: copy,
    }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? String(error) }))
    expect(result.stdout).toBe('')
  }, 120_000)

  it('serves the new routes: create, read, list, the workflow with its history and approval email', () => {
    expect(outcome.created.status).toBe(201)
    expect(outcome.created.location).toBe(`/api/invoices/${outcome.created.body.id}`)
    expect(outcome.created.body).toMatchObject({ title: 'Office chairs', status: 'DRAFT' })
    expect(outcome.read).toBe(200)
    expect(outcome.listed).toEqual([outcome.created.body.id])
    expect([outcome.submitted, outcome.approved]).toEqual(['SUBMITTED', 'APPROVED'])
    expect(outcome.history).toEqual(['submit', 'approve'])
    expect(outcome.approvalMail).toEqual({
      template: 'invoice_approved',
      subject: 'Invoice approved: Office chairs',
    })
  })

  it("keeps another organization's resource and the unauthenticated caller out", () => {
    expect(outcome.otherOrganization).toBe(403)
    expect(outcome.unauthenticated).toBe(401)
  })

  it('documents the new routes and scopes, and leaves the template working beside them', () => {
    expect(outcome.documentPaths).toEqual(
      expect.arrayContaining(['/api/invoices', '/api/invoices/{id}', '/api/invoices/{id}/history']),
    )
    expect(outcome.scopes).toEqual(['invoices:read', 'invoices:write'])
    expect(outcome.purchaseRequest).toBe(201)
  })

  it('renames every spelling of the template, plural before singular', () => {
    const pairs = renames('sales_order', 'sales_orders')
    expect(rename('PurchaseRequests purchaseRequest purchase_requests purchase-request', pairs)).toBe(
      'SalesOrders salesOrder sales_orders sales-order',
    )
    expect(rename('Purchase request approved: PURCHASE_REQUEST', pairs)).toBe(
      'Sales order approved: SALES_ORDER',
    )
  })
})
