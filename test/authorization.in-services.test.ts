import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { runWithTenant } from '../src/context.ts'
import type { UserPrincipal } from '../src/principal.ts'
import {
  asUser,
  deliverMail,
  expectProblem,
  newUser,
  signIn,
  type TestUser,
  useMailTestApp,
} from './helpers/accounts.ts'
import { applyTupleChanges } from './helpers/authz.ts'

// Every permission decision is made by a feature's service, so the service refuses whoever calls
// it: a route guards nothing of its own. Resources (organization configuration here) are decided
// through the authorization port; account administration by the caller's account row alone, so a
// role tuple that disagrees with the row decides nothing.

const t = useMailTestApp()

const principalOf = (user: TestUser): UserPrincipal => ({
  type: 'USER',
  id: user.id,
  userId: user.id,
  organizationId: user.organizationId,
  sessionId: randomUUID(),
})

async function removeTuple(subject: string, relation: string, object: string): Promise<void> {
  await applyTupleChanges(t.app, [{ operation: 'delete', subject, relation, object }])
}

describe('organization configuration decided by its service', () => {
  it('refuses a put, a delete and a list on an organization the principal does not belong to, whoever calls the service', async () => {
    const home = await newUser(t.app, { role: 'admin' })
    const stranger = await newUser(t.app, { role: 'admin' })
    const config = t.app.services.orgConfig
    await expect(
      config.put(principalOf(stranger), home.organizationId, 'theme', 'dark'),
    ).rejects.toMatchObject({
      code: 'ACCESS_DENIED',
    })
    await expect(config.delete(principalOf(stranger), home.organizationId, 'theme')).rejects.toMatchObject({
      code: 'ACCESS_DENIED',
    })
    await expect(config.list(principalOf(stranger), home.organizationId)).rejects.toMatchObject({
      code: 'ACCESS_DENIED',
    })
    expect(await config.getValue(home.organizationId, 'theme')).toBeUndefined()

    // The service acts in the caller's organization, as a request of theirs would.
    await runWithTenant(home.organizationId, () =>
      config.put(principalOf(home), home.organizationId, 'theme', 'dark'),
    )
    expect(await config.getValue(home.organizationId, 'theme')).toBe('dark')
  })

  it('refuses a member a put and a delete, and lets the member list', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const config = t.app.services.orgConfig
    await runWithTenant(admin.organizationId, () =>
      config.put(principalOf(admin), admin.organizationId, 'theme', 'light'),
    )
    await expect(
      config.put(principalOf(member), admin.organizationId, 'theme', 'dark'),
    ).rejects.toMatchObject({
      code: 'ACCESS_DENIED',
    })
    await expect(config.delete(principalOf(member), admin.organizationId, 'theme')).rejects.toMatchObject({
      code: 'ACCESS_DENIED',
    })
    const entries = await runWithTenant(admin.organizationId, () =>
      config.list(principalOf(member), admin.organizationId),
    )
    expect(entries.map((entry) => entry.value)).toEqual(['light'])
  })
})

describe('user administration decided by the account record, not the authorization port', () => {
  it('lets an admin act whose admin relation is gone, since the account table still says admin', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const session = await signIn(t.app, admin)
    await removeTuple(`user:${admin.id}`, 'admin', `organization:${admin.organizationId}`)
    // The relation really is gone for the authorization port.
    const check = await asUser(t.app, session, {
      method: 'POST',
      url: '/api/authz/check',
      payload: { relation: 'admin', objectType: 'organization', objectId: admin.organizationId },
    })
    expect(check.json()).toEqual({ allowed: false })

    const reset = await asUser(t.app, session, {
      method: 'POST',
      url: `/api/users/${member.id}/reset-password`,
    })
    expect(reset.statusCode).toBe(202)
    const deactivated = await asUser(t.app, session, {
      method: 'POST',
      url: `/api/users/${member.id}/deactivate`,
    })
    expect(deactivated.json()).toEqual({ userId: member.id, active: false })
    const reactivated = await asUser(t.app, session, {
      method: 'POST',
      url: `/api/users/${member.id}/reactivate`,
    })
    expect(reactivated.json()).toEqual({ userId: member.id, active: true })
    expect(await deliverMail(t)).toBe(1)
  })

  it('refuses a member whose leftover admin tuple says admin, and changes nothing', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const other = await newUser(t.app, { organizationId: admin.organizationId })
    const session = await signIn(t.app, member)
    await applyTupleChanges(t.app, [
      {
        operation: 'write',
        subject: `user:${member.id}`,
        relation: 'admin',
        object: `organization:${admin.organizationId}`,
      },
    ])

    for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
      const res = await asUser(t.app, session, { method: 'POST', url: `/api/users/${other.id}/${action}` })
      expectProblem(res, 403, 'ACCESS_DENIED')
    }
    const stored = await t.app.db
      .selectFrom('accounts')
      .select(['id', 'role', 'active'])
      .where('id', 'in', [member.id, other.id])
      .execute()
    expect(stored.every((row) => row.role === 'member' && row.active)).toBe(true)
    expect(await deliverMail(t)).toBe(0)
  })
})
