import { randomUUID } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { runWithTenant } from '../src/context.ts'
import { inTransaction } from '../src/db/database.ts'
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

// Every permission decision is made by a feature's service through the authorization port: a
// route guards nothing of its own, so the service refuses whoever calls it, and the account table
// is not a second source of authority.

const t = useMailTestApp()

const principalOf = (user: TestUser): UserPrincipal => ({
  type: 'USER',
  id: user.id,
  userId: user.id,
  organizationId: user.organizationId,
  sessionId: randomUUID(),
})

async function removeTuple(subject: string, relation: string, object: string): Promise<void> {
  await inTransaction(t.app.db, (trx) =>
    t.app.authz.tuples.record(trx, [{ operation: 'delete', subject, relation, object }], new Date()),
  )
  while ((await t.app.authz.outbox.runOnce()) > 0) {}
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

describe('user administration decided through the authorization port', () => {
  it('refuses an admin whose admin relation is gone although the account table still says admin', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const session = await signIn(t.app, admin)
    await removeTuple(`user:${admin.id}`, 'admin', `organization:${admin.organizationId}`)

    for (const action of ['deactivate', 'reactivate', 'reset-password'] as const) {
      const res = await asUser(t.app, session, { method: 'POST', url: `/api/users/${member.id}/${action}` })
      expectProblem(res, 403, 'ACCESS_DENIED')
    }
    const stored = await t.app.db
      .selectFrom('accounts')
      .select(['role', 'active'])
      .where('id', 'in', [admin.id, member.id])
      .orderBy('role')
      .execute()
    expect(stored).toEqual([
      { role: 'admin', active: true },
      { role: 'member', active: true },
    ])
    expect(await deliverMail(t)).toBe(0)
  })

  it('lets an admin holding the relation act', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const session = await signIn(t.app, admin)
    const res = await asUser(t.app, session, { method: 'POST', url: `/api/users/${member.id}/deactivate` })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ userId: member.id, active: false })
  })
})
