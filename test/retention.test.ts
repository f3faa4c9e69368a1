import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { acquireLease } from '../src/outbox/worker-leases.ts'
import {
  FAST_LOGIN_CONFIG,
  newUser,
  refresh,
  requestPasswordReset,
  type Session,
  signIn,
} from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'
import { queueTupleChanges } from './helpers/authz.ts'

// Retention: each table that grows with traffic declares what may go and after
// how long (platform.retention.*), and one housekeeping worker runs the rules in small batches.
// Each rule: what goes, and what stays.

const DAY = 24 * 3600
const t = useTestApp({ config: FAST_LOGIN_CONFIG })

const count = async (table: string, where = sql`true`) => {
  const { rows } = await sql<{
    n: string
  }>`select count(*) as n from ${sql.table(table)} where ${where}`.execute(t.app.db)
  return Number(rows[0]?.n)
}

const logout = (session: Session) =>
  t.app.inject({ method: 'POST', url: '/api/auth/logout', cookies: { refresh_token: session.refresh } })

describe('retention rules', () => {
  it('removes delivered tuple changes after the outbox window and keeps undelivered ones', async () => {
    const delivered = await newUser(t.app)
    await t.app.authz.outbox.runOnce()
    t.clock.advanceSeconds(7 * DAY + 1)
    // Queued for an authorization server that has not taken it yet (the embedded evaluator applies
    // changes at once, so the outbox of this app only holds delivered ones otherwise).
    const pending = {
      operation: 'write' as const,
      subject: 'user:pending',
      relation: 'member',
      object: 'organization:o',
    }
    await queueTupleChanges(t.app, [pending])
    await sql`update authz_outbox set created_at = created_at - interval '30 days' where subject = 'user:pending'`.execute(
      t.app.db,
    )
    await t.app.housekeeping.runOnce()
    expect(await count('authz_outbox', sql`subject = ${`user:${delivered.id}`}`)).toBe(0)
    expect(await count('authz_outbox', sql`subject = 'user:pending'`)).toBe(1)
    // Delivered tuples themselves are not outbox rows: the user keeps their membership.
    expect(
      await t.app.authz.port.check({
        user: `user:${delivered.id}`,
        relation: 'member',
        object: `organization:${delivered.organizationId}`,
      }),
    ).toBe(true)
  })

  it('removes sent mail after the outbox window and keeps mail still to send', async () => {
    const user = await newUser(t.app)
    await requestPasswordReset(t.app, user.email)
    await t.app.background.idle()
    await t.app.mail.worker.runOnce()
    expect(await count('mail_outbox', sql`recipient = ${user.email} and sent_at is not null`)).toBe(1)
    t.clock.advanceSeconds(7 * DAY - 10)
    await t.app.housekeeping.runOnce()
    expect(await count('mail_outbox', sql`recipient = ${user.email}`)).toBe(1)
    t.clock.advanceSeconds(20)
    const later = await newUser(t.app)
    await requestPasswordReset(t.app, later.email)
    await t.app.background.idle()
    await t.app.housekeeping.runOnce()
    expect(await count('mail_outbox', sql`recipient = ${user.email}`)).toBe(0)
    expect(await count('mail_outbox', sql`recipient = ${later.email} and sent_at is null`)).toBe(1)
  })

  it('removes the expired tokens of ended sessions, and ended sessions after the audit window; live sessions keep their rotated tokens', async () => {
    const user = await newUser(t.app)
    const ended = await signIn(t.app, user)
    expect((await logout(ended)).statusCode).toBe(204)
    const live = await signIn(t.app, user)
    const rotated = await refresh(t.app, live)
    expect(rotated.statusCode).toBe(200)

    // Past the refresh-token lifetime (30 days): the ended session's token goes, the session stays.
    t.clock.advanceSeconds(31 * DAY)
    await t.app.housekeeping.runOnce()
    expect(await count('refresh_tokens', sql`session_id = ${ended.sessionId}`)).toBe(0)
    expect(await count('sessions', sql`id = ${ended.sessionId}`)).toBe(1)
    // The live session (absolute lifetime 90 days) keeps every token, the rotated one included.
    expect(await count('refresh_tokens', sql`session_id = ${live.sessionId}`)).toBe(2)

    // Past the audit window (90 days after it ended): the ended session goes; the live one stays.
    t.clock.advanceSeconds(60 * DAY)
    await t.app.housekeeping.runOnce()
    expect(await count('sessions', sql`id = ${ended.sessionId}`)).toBe(0)
    expect(await count('sessions', sql`id = ${live.sessionId}`)).toBe(1)
  })

  it('removes used and expired one-time tokens after their window and keeps outstanding ones', async () => {
    const spent = await newUser(t.app)
    await requestPasswordReset(t.app, spent.email)
    await t.app.background.idle()
    t.clock.advanceSeconds(3600 + 7 * DAY + 1)
    const fresh = await newUser(t.app)
    await requestPasswordReset(t.app, fresh.email)
    await t.app.background.idle()
    await t.app.housekeeping.runOnce()
    expect(await count('one_time_tokens', sql`account_id = ${spent.id}`)).toBe(0)
    expect(await count('one_time_tokens', sql`account_id = ${fresh.id}`)).toBe(1)
  })

  it('runs on one instance at a time, through the housekeeping lease', async () => {
    const user = await newUser(t.app)
    await logout(await signIn(t.app, user))
    t.clock.advanceSeconds(91 * DAY)
    const now = t.clock.now()
    // Another instance is running the rules.
    expect(
      await acquireLease(t.app.db, 'housekeeping', 'other-instance', now, new Date(now.getTime() + 60_000)),
    ).toBe(true)
    expect(await t.app.housekeeping.runOnce()).toEqual({})
    expect(await count('sessions', sql`user_id = ${user.id}`)).toBe(1)
    // Its lease runs out (it died): this instance takes over.
    t.clock.advanceSeconds(61)
    expect((await t.app.housekeeping.runOnce()).sessions).toBeGreaterThanOrEqual(1)
    expect(await count('sessions', sql`user_id = ${user.id}`)).toBe(0)
  })

  it('has the queue tables vacuumed after a fixed number of dead rows, not a share of the table (the decay)', async () => {
    const { rows } = await sql<{ relname: string; reloptions: string[] | null }>`
      select relname, reloptions from pg_class
      where relname in ('authz_outbox', 'mail_outbox', 'worker_leases', 'rate_limits') order by relname`.execute(
      t.app.db,
    )
    expect(rows.map((r) => r.relname)).toEqual([
      'authz_outbox',
      'mail_outbox',
      'rate_limits',
      'worker_leases',
    ])
    for (const row of rows) {
      expect(row.reloptions).toEqual(
        expect.arrayContaining(['autovacuum_vacuum_scale_factor=0', 'autovacuum_vacuum_threshold=1000']),
      )
    }
  })

  it('counts the rows each rule removed in /metrics', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/metrics' })
    expect(res.body).toMatch(/housekeeping_rows_removed_total\{rule="sessions"\} [1-9]/)
    expect(res.body).toMatch(/housekeeping_rows_removed_total\{rule="authz_outbox"\} [1-9]/)
  })
})
