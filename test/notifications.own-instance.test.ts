import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inTransaction } from '../src/db/database.ts'
import { echoing, LISTEN_LOST, LISTEN_RESET, notify } from '../src/db/notifications.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, type Session, signIn } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// A process hears its own notifications at commit (`notify` and `echoing`, src/db/notifications.ts),
// without waiting for its LISTEN connection. Here that connection never delivers a payload (only
// LISTEN_LOST and LISTEN_RESET pass): whatever a subscriber hears came through the process.

let database: TestDatabase
let t: TestApp
let orgId: string
let admin: Session

const CHANNEL = 'platform_test_echo'
const KEY = 'ui.banner'

/** The handle's listen, minus every payload the LISTEN connection would deliver. */
function deafListen(): TestDatabase['handle']['listen'] {
  const { handle } = database
  return (channel, onMessage) =>
    handle.listen(channel, (payload) => {
      if (payload === LISTEN_LOST || payload === LISTEN_RESET) onMessage(payload)
    })
}

beforeAll(async () => {
  database = await createTestDatabase()
  t = await createTestApp({
    database: { ...database, handle: { ...database.handle, listen: deafListen() } },
    config: ACCOUNT_TEST_CONFIG,
  })
  const user = await newUser(t.app, { role: 'admin' })
  while ((await t.app.authz.outbox.runOnce()) > 0) {}
  orgId = user.organizationId
  admin = await signIn(t.app, user)
})

afterAll(async () => {
  await t?.close()
  await database?.dispose()
})

describe('notifications in the process that sends them', () => {
  it('reach a subscriber once the transaction commits, and not before', async () => {
    const heard: string[] = []
    const stop = await echoing(database.handle.db, deafListen())(CHANNEL, (payload) => heard.push(payload))
    try {
      await inTransaction(database.handle.db, async (trx) => {
        await notify(trx, CHANNEL, 'first')
        expect(heard).toEqual([])
      })
      expect(heard).toEqual(['first'])
    } finally {
      await stop()
    }
  })

  it('never reach a subscriber when the transaction rolls back', async () => {
    const heard: string[] = []
    const stop = await echoing(database.handle.db, deafListen())(CHANNEL, (payload) => heard.push(payload))
    try {
      await expect(
        inTransaction(database.handle.db, async (trx) => {
          await notify(trx, CHANNEL, 'undone')
          throw new Error('roll back')
        }),
      ).rejects.toThrow('roll back')
      expect(heard).toEqual([])
    } finally {
      await stop()
    }
  })

  it('reach only subscribers of that channel on that database, until they stop', async () => {
    const other = await createTestDatabase()
    try {
      const here: string[] = []
      const elsewhere: string[] = []
      const otherChannel: string[] = []
      const stopHere = await echoing(database.handle.db, deafListen())(CHANNEL, (p) => here.push(p))
      const stopElsewhere = await echoing(other.handle.db, other.handle.listen)(CHANNEL, (p) =>
        elsewhere.push(p),
      )
      const stopOther = await echoing(database.handle.db, deafListen())(`${CHANNEL}_other`, (p) =>
        otherChannel.push(p),
      )
      await inTransaction(database.handle.db, (trx) => notify(trx, CHANNEL, 'one'))
      await stopHere()
      await inTransaction(database.handle.db, (trx) => notify(trx, CHANNEL, 'two'))
      expect(here).toEqual(['one'])
      expect(otherChannel).toEqual([])
      // The other database's LISTEN connection (or PGlite session) is its own: nothing of this one.
      await inTransaction(other.handle.db, (trx) => notify(trx, CHANNEL, 'probe'))
      expect(elsewhere).toContain('probe')
      expect(elsewhere).not.toContain('one')
      expect(elsewhere).not.toContain('two')
      await stopElsewhere()
      await stopOther()
    } finally {
      await other.dispose()
    }
  })

  it('let an instance read its own configuration change at once, although it had the old value cached', async () => {
    const put = async (value: string) => {
      const res = await asUser(t.app, admin, {
        method: 'PUT',
        url: `/api/organizations/${orgId}/config/${KEY}`,
        payload: { value },
      })
      expect(res.statusCode).toBe(200)
    }
    const config = t.app.services.orgConfig
    expect(config.listening).toBe(true)
    await put('first')
    expect(await config.getValue(orgId, KEY)).toBe('first')
    await put('second')
    expect(await config.getValue(orgId, KEY)).toBe('second')
    const res = await asUser(t.app, admin, {
      method: 'DELETE',
      url: `/api/organizations/${orgId}/config/${KEY}`,
    })
    expect(res.statusCode).toBe(204)
    expect(await config.getValue(orgId, KEY)).toBeUndefined()
  })
})
