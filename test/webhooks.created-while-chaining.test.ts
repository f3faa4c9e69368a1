import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { inTransaction } from '../src/db/database.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newActor } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { usingPostgres } from './helpers/database.ts'
import { pollUntil } from './helpers/poll.ts'

// A webhook endpoint gets every event written after the position it notes when created
// (webhookFanOut), and events are fanned out when the chainer chains them. An event written after
// that position but chained before the endpoint's transaction commits would miss the endpoint: the
// creating transaction holds its organization's chain (AuditTrail.holdChain), so the chainer waits.
//
// The creation (POST /api/webhooks) is held open right after its endpoint row is written by a
// trigger of this test's database that waits for an advisory lock the test holds. On PostgreSQL only:
// on PGlite's one session an open transaction holds every other statement back.

const t = useTestApp({
  config: { ...ACCOUNT_TEST_CONFIG, 'platform.webhooks.allow-private-networks': 'true' },
})

const GATE = 4242

/** Whether a session of this database waits for a row or transaction lock (not the test's gate). */
async function someoneWaitsForARow(): Promise<boolean> {
  const { rows } = await sql<{ waiting: string }>`
    select count(*) as waiting from pg_locks l join pg_stat_activity a on a.pid = l.pid
    where a.datname = current_database() and not l.granted and l.locktype <> 'advisory'`.execute(t.app.db)
  return Number(rows[0]?.waiting) > 0
}

describe.skipIf(!usingPostgres())(
  'a webhook endpoint created while its organization’s events are chained',
  () => {
    it('receives the event written after it, although the event committed first', {
      timeout: 60_000,
    }, async () => {
      const admin = await newActor(t.app, { role: 'admin' })
      const { organizationId } = admin.user
      await sql`
      create function test_hold_endpoint() returns trigger language plpgsql as $$
      begin perform pg_advisory_xact_lock(${sql.lit(GATE)}); return new; end $$`.execute(t.app.db)
      await sql`
      create trigger test_hold_endpoint after insert on webhook_endpoints
      for each row execute function test_hold_endpoint()`.execute(t.app.db)

      // The gate, held by a transaction of the test's until it lets the creation go on.
      let open: () => void = () => {}
      const gateHeld = new Promise<void>((resolve) => {
        open = resolve
      })
      let closed: () => void = () => {}
      const gateClosed = new Promise<void>((resolve) => {
        closed = resolve
      })
      const gate = inTransaction(t.app.db, async (trx) => {
        await sql`select pg_advisory_xact_lock(${GATE})`.execute(trx)
        closed()
        await gateHeld
      })
      await gateClosed

      const creating = asUser(t.app, admin.session, {
        method: 'POST',
        url: '/api/webhooks',
        payload: { url: 'http://127.0.0.1:9/hooks', eventTypes: ['*'] },
      })
      await pollUntil(
        'the creation waiting at the gate, its endpoint row written',
        async () => {
          const { rows } = await sql<{ waiting: string }>`
          select count(*) as waiting from pg_locks l join pg_stat_activity a on a.pid = l.pid
          where a.datname = current_database() and not l.granted and l.locktype = 'advisory'`.execute(
            t.app.db,
          )
          return Number(rows[0]?.waiting) > 0
        },
        20_000,
      )

      // An event written, and committed, after the endpoint noted its position, by a transaction that
      // touches nothing the creation holds (a sign-in's is such a one).
      await inTransaction(t.app.db, (trx) =>
        t.app.services.audit.record(trx, {
          type: 'test.event',
          organizationId,
          actor: { type: 'system', id: null },
          data: {},
        }),
      )
      let settled = false
      const chaining = t.app.services.auditChainer.settle(organizationId).finally(() => {
        settled = true
      })
      await pollUntil(
        'the chainer done, or waiting for the creation',
        async () => settled || (await someoneWaitsForARow()),
        20_000,
      )
      open()
      await gate
      const created = await creating
      expect(created.statusCode, created.body).toBe(201)
      await chaining
      await t.app.services.auditChainer.idle()

      const messages = await t.app.db
        .selectFrom('webhook_outbox')
        .select('event_type')
        .where('endpoint_id', '=', created.json().id)
        .execute()
      expect(messages.map((m) => m.event_type)).toEqual(['test.event'])
    })
  },
)
