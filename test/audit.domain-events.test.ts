import type { LightMyRequestResponse } from 'fastify'
import { Secret, TOTP } from 'otpauth'
import { describe, expect, it } from 'vitest'
import { asUser, expectProblem, newActor, newUser, type Session, signIn } from './helpers/accounts.ts'
import { confirm, initiated, putBytes, useFilesTestApp } from './helpers/files.ts'

// Audit events of account management, configuration and the example resource, each performed
// through HTTP and found exactly once with its actor, subject and the request's origin; the
// sign-in, session and machine-principal events are in test/audit.test.ts.

const t = useFilesTestApp({ config: { 'platform.auth.rate-limit.login-per-minute': '1000' } })

const AGENT = 'audit-domain-test/1.0'
const IP = '198.51.100.23'
const from = { remoteAddress: IP, headers: { 'user-agent': AGENT } }
const as = (session: Session, options: Parameters<typeof asUser>[2]) =>
  asUser(t.app, session, { ...options, ...from, headers: { ...from.headers, ...(options.headers ?? {}) } })

async function oneEvent(type: string, subjectId: string, res: LightMyRequestResponse) {
  const events = await t.app.db
    .selectFrom('audit_events')
    .selectAll()
    .where('type', '=', type)
    .where('subject_id', '=', subjectId)
    .execute()
  expect(events, type).toHaveLength(1)
  const event = events[0] as (typeof events)[number]
  expect(event.ip_address).toBe(IP)
  expect(event.user_agent).toBe(AGENT)
  expect(event.request_id).toBe(res.headers['x-request-id'])
  return event
}

describe('account events', () => {
  it('records two-factor enabled, a backup code used and two-factor disabled', async () => {
    const user = await newUser(t.app)
    const session = await signIn(t.app, user)
    const setup = await as(session, { method: 'POST', url: '/api/auth/otp/setup' })
    const totp = new TOTP({
      secret: Secret.fromBase32(setup.json().secret),
      algorithm: 'SHA1',
      digits: 6,
      period: 30,
    })
    const enabled = await as(session, {
      method: 'POST',
      url: '/api/auth/otp/enable',
      payload: { code: totp.generate({ timestamp: t.clock.now().getTime() }) },
    })
    expect(enabled.statusCode).toBe(200)
    expect(await oneEvent('two_factor.enabled', user.id, enabled)).toMatchObject({
      actor_type: 'user',
      actor_id: user.id,
    })

    const [backup] = enabled.json().backupCodes as string[]
    const login = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { username: user.email, password: user.password, otpCode: backup },
      ...from,
    })
    expect(login.statusCode).toBe(200)
    await oneEvent('backup_code.used', user.id, login)

    const disabled = await as(session, { method: 'POST', url: '/api/auth/otp/disable' })
    expect(disabled.statusCode).toBe(200)
    await oneEvent('two_factor.disabled', user.id, disabled)
  })

  it('records an invitation and a reactivation with the admin as actor', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const invited = await as(admin.session, {
      method: 'POST',
      url: '/api/users',
      payload: {
        email: `invited-${Date.now()}@example.com`,
        organizationId: admin.user.organizationId,
        role: 'member',
      },
    })
    expect(invited.statusCode, invited.body).toBe(202)
    const invitee = invited.json().userId as string
    expect(await oneEvent('user.invited', invitee, invited)).toMatchObject({
      actor_id: admin.user.id,
      data: { role: 'member' },
    })

    const member = await newUser(t.app, { organizationId: admin.user.organizationId })
    expect(
      (await as(admin.session, { method: 'POST', url: `/api/users/${member.id}/deactivate` })).statusCode,
    ).toBe(200)
    const back = await as(admin.session, { method: 'POST', url: `/api/users/${member.id}/reactivate` })
    expect(back.statusCode).toBe(200)
    expect(await oneEvent('user.reactivated', member.id, back)).toMatchObject({ data: { active: true } })
  })
})

describe('configuration and the example resource', () => {
  it('records a configuration change by key, never its value', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const orgId = admin.user.organizationId
    const put = await as(admin.session, {
      method: 'PUT',
      url: `/api/organizations/${orgId}/config/ui.banner`,
      payload: { value: 'a secret-looking value' },
    })
    expect(put.statusCode).toBe(200)
    const set = await oneEvent('organization_config.changed', orgId, put)
    expect(set.data).toEqual({ key: 'ui.banner', change: 'set' })
    expect(JSON.stringify(set)).not.toContain('secret-looking')

    const removed = await as(admin.session, {
      method: 'DELETE',
      url: `/api/organizations/${orgId}/config/ui.banner`,
    })
    expect(removed.statusCode).toBe(204)
    const events = await t.app.db
      .selectFrom('audit_events')
      .select('data')
      .where('type', '=', 'organization_config.changed')
      .where('subject_id', '=', orgId)
      .execute()
    expect(events.map((e) => e.data)).toEqual([
      { key: 'ui.banner', change: 'set' },
      { key: 'ui.banner', change: 'removed' },
    ])
  })

  it('records a purchase request created, submitted and approved, and an attachment confirmed', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const created = await as(admin.session, {
      method: 'POST',
      url: '/api/purchase-requests',
      payload: { title: 'Chairs' },
    })
    expect(created.statusCode).toBe(201)
    const id = created.json().id as string
    expect(await oneEvent('purchase_request.created', id, created)).toMatchObject({ actor_id: admin.user.id })
    await t.app.authz.outbox.runOnce()

    const submitted = await as(admin.session, { method: 'POST', url: `/api/purchase-requests/${id}/submit` })
    expect(submitted.statusCode).toBe(200)
    expect(await oneEvent('purchase_request.submitted', id, submitted)).toMatchObject({
      data: { from: 'DRAFT', to: 'SUBMITTED' },
    })
    const approved = await as(admin.session, { method: 'POST', url: `/api/purchase-requests/${id}/approve` })
    expect(approved.statusCode).toBe(200)
    await oneEvent('purchase_request.approved', id, approved)
    // Approving again is refused and records nothing more.
    expectProblem(
      await as(admin.session, { method: 'POST', url: `/api/purchase-requests/${id}/approve` }),
      409,
      'INVALID_TRANSITION',
    )
    await oneEvent('purchase_request.approved', id, approved)

    const upload = await initiated(t.app, admin.session, { resourceId: id })
    expect((await putBytes(upload, '%PDF-1.4 quote')).status).toBe(200)
    const confirmed = await asUser(t.app, admin.session, {
      method: 'POST',
      url: `/api/storage/files/${upload.fileId}/confirm`,
      ...from,
    })
    expect(confirmed.statusCode).toBe(200)
    expect(await oneEvent('file.confirmed', upload.fileId, confirmed)).toMatchObject({
      data: { resourceType: 'purchase_request', resourceId: id, contentType: 'application/pdf' },
    })
    // A second confirm answers the same and records nothing more.
    expect((await confirm(t.app, admin.session, upload.fileId)).statusCode).toBe(200)
    await oneEvent('file.confirmed', upload.fileId, confirmed)
  })
})
