import { randomUUID } from 'node:crypto'
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import { beforeAll, describe, expect, it } from 'vitest'
import { inTransaction } from '../src/db/database.ts'
import { APPROVAL_EMAIL_SUBJECT_KEY } from '../src/features/purchase-requests/approval.ts'
import { enqueueMail } from '../src/mail/outbox.ts'
import type { MailTransport, OutgoingMail } from '../src/mail/transports.ts'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  expectProblem,
  newUser,
  type Session,
  signIn,
} from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { newApiKey } from './helpers/machines.ts'

// Organization configuration over HTTP: members read, admins write, nobody
// reaches another organization's entries; keys and values are validated; API keys need the
// config scopes. And the approval email's subject is read from the organization's entry when the
// message is sent.

/** Records what the mail worker sends. */
class CapturingTransport implements MailTransport {
  readonly sent: OutgoingMail[] = []
  async send(message: OutgoingMail): Promise<void> {
    this.sent.push(message)
  }
  async close(): Promise<void> {}
}

const mail = new CapturingTransport()

const t = useTestApp({
  config: ACCOUNT_TEST_CONFIG,
  deps: { mailTransport: mail },
})

type Credentials = { session: Session } | { apiKey: string } | null

function request(
  who: Credentials,
  method: 'GET' | 'PUT' | 'DELETE',
  url: string,
  payload?: Record<string, unknown>,
): Promise<LightMyRequestResponse> {
  const options: InjectOptions = { method, url, ...(payload === undefined ? {} : { payload }) }
  if (who && 'apiKey' in who) return t.app.inject({ ...options, headers: { 'x-api-key': who.apiKey } })
  return asUser(t.app, who?.session ?? null, options)
}

const configUrl = (orgId: string) => `/api/organizations/${orgId}/config`
const entryUrl = (orgId: string, key: string) => `${configUrl(orgId)}/${key}`
const list = (who: Credentials, orgId: string) => request(who, 'GET', configUrl(orgId))
const put = (who: Credentials, orgId: string, key: string, value: string) =>
  request(who, 'PUT', entryUrl(orgId, key), { value })
const remove = (who: Credentials, orgId: string, key: string) => request(who, 'DELETE', entryUrl(orgId, key))

/** Delivers queued authorization tuples (role tuples of new accounts and API keys). */
async function deliverTuples(app: FastifyInstance): Promise<void> {
  while ((await app.authz.outbox.runOnce()) > 0) {}
}

interface Organization {
  orgId: string
  member: Credentials
  admin: Credentials
}

async function organization(): Promise<Organization> {
  const member = await newUser(t.app)
  const admin = await newUser(t.app, { organizationId: member.organizationId, role: 'admin' })
  await deliverTuples(t.app)
  return {
    orgId: member.organizationId,
    member: { session: await signIn(t.app, member) },
    admin: { session: await signIn(t.app, admin) },
  }
}

async function apiKey(organizationId: string, scopes: string[]): Promise<Credentials> {
  const key = await newApiKey(t.app, organizationId, scopes)
  await deliverTuples(t.app)
  return { apiKey: key.rawKey }
}

describe('organization configuration endpoints', () => {
  let home: Organization
  let other: Organization

  beforeAll(async () => {
    home = await organization()
    other = await organization()
  })

  it('requires authentication on every operation', async () => {
    expectProblem(await list(null, home.orgId), 401, 'AUTHENTICATION_REQUIRED')
    expectProblem(await put(null, home.orgId, 'theme', 'dark'), 401, 'AUTHENTICATION_REQUIRED')
    expectProblem(await remove(null, home.orgId, 'theme'), 401, 'AUTHENTICATION_REQUIRED')
  })

  it('lets an admin store a value, answering the entry with updatedAt from the clock', async () => {
    const res = await put(home.admin, home.orgId, 'ui.theme', 'dark')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ key: 'ui.theme', value: 'dark', updatedAt: t.clock.now().toISOString() })
  })

  it('lets members read the entries', async () => {
    await put(home.admin, home.orgId, 'ui.logo_url', 'https://example.test/logo.svg')
    const at = t.clock.now().toISOString()
    const res = await list(home.member, home.orgId)
    expect(res.statusCode).toBe(200)
    expect(res.json().items).toContainEqual({
      key: 'ui.logo_url',
      value: 'https://example.test/logo.svg',
      updatedAt: at,
    })
  })

  it('answers an empty list for an organization without entries', async () => {
    const fresh = await organization()
    const res = await list(fresh.member, fresh.orgId)
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ items: [] })
  })

  it('overwrites a value and its updatedAt, keeping one entry per key', async () => {
    await put(home.admin, home.orgId, 'limits.max_items', '10')
    t.clock.advanceSeconds(90)
    const res = await put(home.admin, home.orgId, 'limits.max_items', '25')
    expect(res.json()).toEqual({
      key: 'limits.max_items',
      value: '25',
      updatedAt: t.clock.now().toISOString(),
    })
    const items = (await list(home.member, home.orgId)).json().items as { key: string }[]
    expect(items.filter((item) => item.key === 'limits.max_items')).toEqual([
      { key: 'limits.max_items', value: '25', updatedAt: t.clock.now().toISOString() },
    ])
  })

  it('removes a value with 204, and answers 204 again when it is already gone', async () => {
    await put(home.admin, home.orgId, 'feature.beta', 'on')
    const res = await remove(home.admin, home.orgId, 'feature.beta')
    expect(res.statusCode).toBe(204)
    expect(res.body).toBe('')
    const keys = ((await list(home.member, home.orgId)).json().items as { key: string }[]).map((i) => i.key)
    expect(keys).not.toContain('feature.beta')
    expect((await remove(home.admin, home.orgId, 'feature.beta')).statusCode).toBe(204)
  })

  it('refuses writes by members with 403 ACCESS_DENIED and keeps the value', async () => {
    await put(home.admin, home.orgId, 'locked', 'admin value')
    expectProblem(await put(home.member, home.orgId, 'locked', 'member value'), 403, 'ACCESS_DENIED')
    expectProblem(await remove(home.member, home.orgId, 'locked'), 403, 'ACCESS_DENIED')
    const items = (await list(home.member, home.orgId)).json().items
    expect(items).toContainEqual(expect.objectContaining({ key: 'locked', value: 'admin value' }))
  })

  it("returns 403 for another organization's configuration, even to its admin-level callers", async () => {
    await put(home.admin, home.orgId, 'secret.setting', 'home only')
    expectProblem(await list(other.admin, home.orgId), 403, 'ACCESS_DENIED')
    expectProblem(await list(other.member, home.orgId), 403, 'ACCESS_DENIED')
    expectProblem(await put(other.admin, home.orgId, 'secret.setting', 'taken over'), 403, 'ACCESS_DENIED')
    expectProblem(await remove(other.admin, home.orgId, 'secret.setting'), 403, 'ACCESS_DENIED')
    const items = (await list(home.member, home.orgId)).json().items
    expect(items).toContainEqual(expect.objectContaining({ key: 'secret.setting', value: 'home only' }))
    // Nor does another organization's listing show it.
    expect((await list(other.member, other.orgId)).json().items).toEqual([])
  })

  it('returns 403, not 404, for an organization id that does not exist', async () => {
    const unknown = randomUUID()
    expectProblem(await list(home.admin, unknown), 403, 'ACCESS_DENIED')
    expectProblem(await put(home.admin, unknown, 'theme', 'dark'), 403, 'ACCESS_DENIED')
    expectProblem(await remove(home.admin, unknown, 'theme'), 403, 'ACCESS_DENIED')
  })

  // The router takes a path segment of up to maxParamLength characters (src/app.ts), longer than
  // any valid key; Fastify's default is 100.
  const routerLimit = () => t.app.initialConfig.routerOptions?.maxParamLength ?? 100

  it('rejects invalid keys with 400 VALIDATION_FAILED naming params.key', async () => {
    expect(routerLimit()).toBeGreaterThan(128)
    for (const key of [
      'Theme',
      'ui.Theme',
      '.hidden',
      '_private',
      '-dash',
      'a'.repeat(129),
      'a'.repeat(routerLimit()),
      'ui%2Ftheme',
    ]) {
      for (const res of [
        await put(home.admin, home.orgId, key, 'x'),
        await remove(home.admin, home.orgId, key),
      ]) {
        expectProblem(res, 400, 'VALIDATION_FAILED')
        expect(res.json().errors).toEqual([expect.objectContaining({ path: 'params.key' })])
      }
    }
  })

  it('answers 414 URI_TOO_LONG for a key longer than the router takes, and 404 for a nested path', async () => {
    const tooLong = 'a'.repeat(routerLimit() + 1)
    expectProblem(await put(home.admin, home.orgId, tooLong, 'x'), 414, 'URI_TOO_LONG')
    expectProblem(await remove(home.admin, home.orgId, tooLong), 414, 'URI_TOO_LONG')
    expectProblem(await put(home.admin, home.orgId, 'ui/theme', 'x'), 404, 'NOT_FOUND')
    expectProblem(await remove(home.admin, home.orgId, 'ui/theme'), 404, 'NOT_FOUND')
  })

  it('accepts the longest key and every allowed character', async () => {
    for (const key of ['a'.repeat(128), '0-start_with.digit', 'x']) {
      const res = await put(home.admin, home.orgId, key, 'ok')
      expect(res.statusCode).toBe(200)
      expect(res.json().key).toBe(key)
    }
    expect((await remove(home.admin, home.orgId, 'a'.repeat(128))).statusCode).toBe(204)
  })

  it('accepts a value of 64 KiB and rejects a larger one with 400 naming body.value', async () => {
    expect((await put(home.admin, home.orgId, 'large', 'x'.repeat(64 * 1024))).statusCode).toBe(200)
    // Measured in UTF-8 bytes: 32,769 two-byte characters are over the limit.
    for (const value of ['x'.repeat(64 * 1024 + 1), 'é'.repeat(32 * 1024 + 1)]) {
      const res = await put(home.admin, home.orgId, 'large', value)
      expectProblem(res, 400, 'VALIDATION_FAILED')
      expect(res.json().errors).toEqual([expect.objectContaining({ path: 'body.value' })])
    }
    const stored = (await list(home.member, home.orgId))
      .json()
      .items.find((i: { key: string }) => i.key === 'large')
    expect(stored.value).toHaveLength(64 * 1024)
  })

  it('rejects a missing or structured value, NUL characters and unknown properties', async () => {
    const url = entryUrl(home.orgId, 'shape')
    const payloads = [
      {},
      { value: { nested: 'x' } },
      { value: ['x', 'y'] },
      { value: 'x', extra: true },
      { value: 'a\u0000b' },
    ]
    for (const payload of payloads) {
      expectProblem(await request(home.admin, 'PUT', url, payload), 400, 'VALIDATION_FAILED')
    }
  })

  it('stores text as given: empty, multi-line and non-ASCII values', async () => {
    for (const value of ['', 'line one\nline two', 'Zürich — 東京 ✓']) {
      expect((await put(home.admin, home.orgId, 'text', value)).json().value).toBe(value)
      const items = (await list(home.member, home.orgId)).json().items
      expect(items).toContainEqual(expect.objectContaining({ key: 'text', value }))
    }
  })

  it('lets an API key with config:read read, and refuses one without it with 403 INSUFFICIENT_SCOPE', async () => {
    await put(home.admin, home.orgId, 'integration.visible', 'yes')
    const reader = await apiKey(home.orgId, ['config:read'])
    const res = await list(reader, home.orgId)
    expect(res.statusCode).toBe(200)
    expect(res.json().items).toContainEqual(
      expect.objectContaining({ key: 'integration.visible', value: 'yes' }),
    )

    const unscoped = await apiKey(home.orgId, ['files:read'])
    expectProblem(await list(unscoped, home.orgId), 403, 'INSUFFICIENT_SCOPE')
    // Reading is not writing: config:read alone cannot change anything.
    expectProblem(await put(reader, home.orgId, 'integration.visible', 'no'), 403, 'INSUFFICIENT_SCOPE')
    expectProblem(await remove(reader, home.orgId, 'integration.visible'), 403, 'INSUFFICIENT_SCOPE')
  })

  it('lets an API key with config:write (an organization admin) write, only in its organization', async () => {
    const writer = await apiKey(home.orgId, ['config:read', 'config:write'])
    const res = await put(writer, home.orgId, 'integration.written', 'by key')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ key: 'integration.written', value: 'by key' })
    expect((await remove(writer, home.orgId, 'integration.written')).statusCode).toBe(204)

    expectProblem(await put(writer, other.orgId, 'integration.written', 'elsewhere'), 403, 'ACCESS_DENIED')
    expectProblem(await list(writer, other.orgId), 403, 'ACCESS_DENIED')
  })

  it('lets an API key with another write scope but not config:write only read', async () => {
    const key = await apiKey(home.orgId, ['config:read', 'files:write'])
    expect((await list(key, home.orgId)).statusCode).toBe(200)
    expectProblem(await put(key, home.orgId, 'integration.other', 'x'), 403, 'INSUFFICIENT_SCOPE')
  })

  it('documents the three operations in the OpenAPI description, and no other configuration path', async () => {
    const document = (await t.app.inject({ method: 'GET', url: '/v3/api-docs' })).json()
    expect(document.paths['/api/organizations/{orgId}/config'].get.operationId).toBe('listOrganizationConfig')
    const entry = document.paths['/api/organizations/{orgId}/config/{key}']
    expect(entry.put.operationId).toBe('putOrganizationConfig')
    expect(entry.delete.operationId).toBe('deleteOrganizationConfig')
    expect(entry.put['x-required-scope']).toBe('config:write')
    expect(Object.keys(document.paths).filter((path) => path.includes('/config'))).toEqual([
      '/api/organizations/{orgId}/config',
      '/api/organizations/{orgId}/config/{key}',
    ])
  })
})

describe('approval email subject', () => {
  async function sendApprovalMail(organizationId: string, title: string): Promise<string> {
    const to = `requester-${randomUUID()}@example.com`
    await inTransaction(t.app.db, (trx) =>
      enqueueMail(
        trx,
        { template: 'purchase_request_approved', to, data: { title }, organizationId },
        t.clock.now(),
      ),
    )
    await t.app.mail.worker.runOnce()
    const sent = mail.sent.filter((message) => message.to === to)
    expect(sent).toHaveLength(1)
    return sent[0]?.subject ?? ''
  }

  it("is the organization's configured subject, with {title} filled in and CR/LF removed", async () => {
    const { orgId, admin } = await organization()
    const res = await put(admin, orgId, APPROVAL_EMAIL_SUBJECT_KEY, 'Approved: {title}\r\nBcc: x@y')
    expect(res.statusCode).toBe(200)
    const subject = await sendApprovalMail(orgId, 'Desk chairs')
    expect(subject).toBe('Approved: Desk chairs Bcc: x@y')
    expect(subject).not.toMatch(/[\r\n]/)
    // The title is inserted as text: replacement patterns in it are not expanded.
    expect(await sendApprovalMail(orgId, "Price $& $' $1")).toBe("Approved: Price $& $' $1 Bcc: x@y")
  })

  it('is the template default when the key is not set, blank, or removed', async () => {
    const { orgId, admin } = await organization()
    expect(await sendApprovalMail(orgId, 'Monitors')).toBe('Purchase request approved: Monitors')
    await put(admin, orgId, APPROVAL_EMAIL_SUBJECT_KEY, ' \r\n ')
    expect(await sendApprovalMail(orgId, 'Monitors')).toBe('Purchase request approved: Monitors')
    await put(admin, orgId, APPROVAL_EMAIL_SUBJECT_KEY, 'Custom')
    expect(await sendApprovalMail(orgId, 'Monitors')).toBe('Custom')
    await remove(admin, orgId, APPROVAL_EMAIL_SUBJECT_KEY)
    expect(await sendApprovalMail(orgId, 'Monitors')).toBe('Purchase request approved: Monitors')
  })

  it("uses each organization's own subject", async () => {
    const first = await organization()
    const second = await organization()
    await put(first.admin, first.orgId, APPROVAL_EMAIL_SUBJECT_KEY, 'First org: {title}')
    expect(await sendApprovalMail(first.orgId, 'Lamps')).toBe('First org: Lamps')
    expect(await sendApprovalMail(second.orgId, 'Lamps')).toBe('Purchase request approved: Lamps')
  })
})
