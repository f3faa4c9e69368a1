import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ACCOUNT_TEST_CONFIG, type Actor, asUser, expectProblem, newActor } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { TestDnsServer } from './helpers/dns-server.ts'

// An organization's SSO settings: connections (client secret sealed at rest, never answered,
// issuers https only outside development) and email domains proved by a TXT record that a real DNS
// server on loopback answers; a domain verified by one organization is 409 for every other;
// public suffixes and free email providers' domains are refused.

let t: TestApp
let dns: TestDnsServer
let admin: Actor
let member: Actor
let otherAdmin: Actor

const BASE = '/api/organizations/current/sso'
const newDomain = () => `acme-${randomBytes(4).toString('hex')}.test`

beforeAll(async () => {
  dns = await TestDnsServer.start()
  t = await createTestApp({ config: { ...ACCOUNT_TEST_CONFIG, 'platform.dns.servers': dns.address } })
  admin = await newActor(t.app, { role: 'admin' })
  member = await newActor(t.app, { organizationId: admin.user.organizationId, role: 'member' })
  otherAdmin = await newActor(t.app, { role: 'admin' })
})

afterAll(async () => {
  await t?.close()
  await dns?.close()
})

const as = (actor: Actor | null, options: Parameters<typeof asUser>[2]) =>
  asUser(t.app, actor?.session ?? null, options)

const connection = {
  name: 'Acme IdP',
  issuer: 'https://idp.acme.test/realms/acme',
  clientId: 'platform',
  clientSecret: 'very-secret-client-secret',
}

const auditTypes = async (organizationId: string) =>
  (
    await t.app.db
      .selectFrom('audit_events')
      .select('type')
      .where('organization_id', '=', organizationId)
      .execute()
  ).map((row) => row.type)

describe('SSO connections', () => {
  it('creates, reads, updates and deletes a connection without ever answering or storing the secret in clear', async () => {
    const created = await as(admin, { method: 'POST', url: `${BASE}/connections`, payload: connection })
    expect(created.statusCode, created.body).toBe(201)
    const body = created.json()
    expect(body).toMatchObject({
      name: 'Acme IdP',
      issuer: connection.issuer,
      clientId: 'platform',
      enabled: true,
    })
    expect(created.body).not.toContain(connection.clientSecret)
    const stored = await t.app.db
      .selectFrom('sso_connections')
      .select('client_secret')
      .where('id', '=', body.id)
      .executeTakeFirstOrThrow()
    expect(stored.client_secret).not.toContain(connection.clientSecret)

    const listed = await as(admin, { method: 'GET', url: `${BASE}/connections` })
    expect(listed.json().items.map((item: { id: string }) => item.id)).toEqual([body.id])
    expect(listed.body).not.toContain(connection.clientSecret)

    const updated = await as(admin, {
      method: 'PATCH',
      url: `${BASE}/connections/${body.id}`,
      payload: { clientSecret: 'rotated-secret', enabled: false },
    })
    expect(updated.statusCode, updated.body).toBe(200)
    expect(updated.json().enabled).toBe(false)
    expect(updated.body).not.toContain('rotated-secret')

    const removed = await as(admin, { method: 'DELETE', url: `${BASE}/connections/${body.id}` })
    expect(removed.statusCode).toBe(204)
    expect((await as(admin, { method: 'GET', url: `${BASE}/connections/${body.id}` })).statusCode).toBe(404)
    expect(await auditTypes(admin.user.organizationId)).toEqual(
      expect.arrayContaining(['sso_connection.created', 'sso_connection.updated', 'sso_connection.deleted']),
    )
  })

  it('allows one enabled connection per organization: a second is 409 SSO_CONNECTION_ENABLED', async () => {
    const first = await as(admin, { method: 'POST', url: `${BASE}/connections`, payload: connection })
    expect(first.statusCode).toBe(201)
    const second = await as(admin, { method: 'POST', url: `${BASE}/connections`, payload: connection })
    expectProblem(second, 409, 'SSO_CONNECTION_ENABLED')
    const disabled = await as(admin, {
      method: 'POST',
      url: `${BASE}/connections`,
      payload: { ...connection, enabled: false },
    })
    expect(disabled.statusCode).toBe(201)
    await as(admin, { method: 'DELETE', url: `${BASE}/connections/${first.json().id}` })
    await as(admin, { method: 'DELETE', url: `${BASE}/connections/${disabled.json().id}` })
  })

  it('refuses an http issuer off loopback, and anything but a URL, with 400', async () => {
    for (const issuer of [
      'http://idp.acme.test',
      'ftp://idp.acme.test',
      'not a url',
      'https://idp.test/?a=b',
    ]) {
      const res = await as(admin, {
        method: 'POST',
        url: `${BASE}/connections`,
        payload: { ...connection, issuer },
      })
      expectProblem(res, 400, 'VALIDATION_FAILED')
    }
  })

  it('is for organization admins: a member is 403, no session 401, another organization sees nothing', async () => {
    const created = await as(admin, {
      method: 'POST',
      url: `${BASE}/connections`,
      payload: { ...connection, enabled: false },
    })
    const id = created.json().id
    expectProblem(await as(member, { method: 'GET', url: `${BASE}/connections` }), 403, 'ACCESS_DENIED')
    expectProblem(
      await as(member, { method: 'POST', url: `${BASE}/connections`, payload: connection }),
      403,
      'ACCESS_DENIED',
    )
    expectProblem(
      await as(null, { method: 'GET', url: `${BASE}/connections` }),
      401,
      'AUTHENTICATION_REQUIRED',
    )
    expectProblem(await as(otherAdmin, { method: 'GET', url: `${BASE}/connections/${id}` }), 404, 'NOT_FOUND')
    expectProblem(
      await as(otherAdmin, { method: 'PATCH', url: `${BASE}/connections/${id}`, payload: { enabled: true } }),
      404,
      'NOT_FOUND',
    )
    expectProblem(
      await as(otherAdmin, { method: 'DELETE', url: `${BASE}/connections/${id}` }),
      404,
      'NOT_FOUND',
    )
    expect((await as(otherAdmin, { method: 'GET', url: `${BASE}/connections` })).json().items).toEqual([])
  })
})

describe('SSO domains', () => {
  it('stays pending until the TXT record is published, then a real DNS server verifies it', async () => {
    const domain = newDomain()
    const added = await as(admin, {
      method: 'POST',
      url: `${BASE}/domains`,
      payload: { domain: domain.toUpperCase() },
    })
    expect(added.statusCode, added.body).toBe(201)
    const claim = added.json()
    expect(claim).toMatchObject({ domain, status: 'pending', verifiedAt: null })
    expect(claim.txtRecord.name).toBe(`_platform-verification.${domain}`)
    expect(claim.txtRecord.value).toMatch(/^platform-verification=[A-Za-z0-9_-]{32}$/)

    const early = await as(admin, { method: 'POST', url: `${BASE}/domains/${domain}/verify` })
    expect(early.statusCode, early.body).toBe(200)
    expect(early.json()).toMatchObject({ status: 'pending', verifiedAt: null })
    expect(early.json().checkedAt).not.toBeNull()
    expect(dns.questions).toContain(claim.txtRecord.name)

    // A record with another value proves nothing.
    dns.publishTxt(claim.txtRecord.name, 'platform-verification=someone-else')
    const wrong = await as(admin, { method: 'POST', url: `${BASE}/domains/${domain}/verify` })
    expect(wrong.json().status).toBe('pending')

    dns.publishTxt(claim.txtRecord.name, claim.txtRecord.value)
    const verified = await as(admin, { method: 'POST', url: `${BASE}/domains/${domain}/verify` })
    expect(verified.json()).toMatchObject({ domain, status: 'verified' })
    expect(verified.json().verifiedAt).not.toBeNull()

    const listed = await as(admin, { method: 'GET', url: `${BASE}/domains` })
    expect(listed.json().items).toContainEqual(expect.objectContaining({ domain, status: 'verified' }))
    expect((await as(admin, { method: 'GET', url: added.headers.location as string })).json().status).toBe(
      'verified',
    )
    expect(await auditTypes(admin.user.organizationId)).toEqual(
      expect.arrayContaining(['sso_domain.added', 'sso_domain.verified']),
    )
  })

  it('answers the existing claim when the same domain is added again', async () => {
    const domain = newDomain()
    const first = await as(admin, { method: 'POST', url: `${BASE}/domains`, payload: { domain } })
    const again = await as(admin, { method: 'POST', url: `${BASE}/domains`, payload: { domain } })
    expect(again.statusCode).toBe(200)
    expect(again.json().txtRecord.value).toBe(first.json().txtRecord.value)
  })

  it('is 409 SSO_DOMAIN_VERIFIED_ELSEWHERE for a domain another organization verified, to add or to verify', async () => {
    const domain = newDomain()
    // Both claim it while pending; each gets its own challenge.
    const ours = (await as(admin, { method: 'POST', url: `${BASE}/domains`, payload: { domain } })).json()
    const theirs = (
      await as(otherAdmin, { method: 'POST', url: `${BASE}/domains`, payload: { domain } })
    ).json()
    expect(theirs.txtRecord.value).not.toBe(ours.txtRecord.value)
    dns.publishTxt(ours.txtRecord.name, ours.txtRecord.value)
    dns.publishTxt(theirs.txtRecord.name, theirs.txtRecord.value)
    expect((await as(admin, { method: 'POST', url: `${BASE}/domains/${domain}/verify` })).json().status).toBe(
      'verified',
    )
    expectProblem(
      await as(otherAdmin, { method: 'POST', url: `${BASE}/domains/${domain}/verify` }),
      409,
      'SSO_DOMAIN_VERIFIED_ELSEWHERE',
    )
    const third = await newActor(t.app, { role: 'admin' })
    expectProblem(
      await as(third, { method: 'POST', url: `${BASE}/domains`, payload: { domain } }),
      409,
      'SSO_DOMAIN_VERIFIED_ELSEWHERE',
    )
  })

  it('refuses free email providers and public suffixes with 400', async () => {
    for (const domain of [
      'gmail.com',
      'outlook.com',
      'mail.yahoo.com',
      'co.uk',
      'github.io',
      'com',
      '127.0.0.1',
      'a..b',
    ]) {
      const res = await as(admin, { method: 'POST', url: `${BASE}/domains`, payload: { domain } })
      expectProblem(res, 400, 'VALIDATION_FAILED')
    }
  })

  it("keeps domains per organization: another organization's admin cannot verify or remove ours, a member cannot add one", async () => {
    const domain = newDomain()
    await as(admin, { method: 'POST', url: `${BASE}/domains`, payload: { domain } })
    expectProblem(
      await as(otherAdmin, { method: 'POST', url: `${BASE}/domains/${domain}/verify` }),
      404,
      'NOT_FOUND',
    )
    expectProblem(
      await as(otherAdmin, { method: 'DELETE', url: `${BASE}/domains/${domain}` }),
      404,
      'NOT_FOUND',
    )
    expectProblem(
      await as(member, { method: 'POST', url: `${BASE}/domains`, payload: { domain: newDomain() } }),
      403,
      'ACCESS_DENIED',
    )
    expectProblem(await as(otherAdmin, { method: 'GET', url: `${BASE}/domains/${domain}` }), 404, 'NOT_FOUND')
    expectProblem(await as(null, { method: 'GET', url: `${BASE}/domains` }), 401, 'AUTHENTICATION_REQUIRED')
    expect((await as(admin, { method: 'DELETE', url: `${BASE}/domains/${domain}` })).statusCode).toBe(204)
  })
})
