import type autocannon from 'autocannon'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { asUser, FAST_LOGIN_CONFIG, newActor, newUser, PASSWORD, type TestUser } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import {
  CREATE,
  type Deployment,
  deploymentInstalled,
  LIST,
  revocationOnEvery,
  signInAt,
  startDeployment,
  steadyLoad,
} from '../helpers/deployment.ts'
import { pollUntil } from '../helpers/poll.ts'
import { SmtpSink } from '../helpers/smtp-sink.ts'
import { WebhookReceiver } from '../helpers/webhook-receiver.ts'

// Deployed as in production (test/helpers/deployment.ts): three `npm start` processes behind a
// real HAProxy that health-checks GET /health/ready, on one PostgreSQL database through a real
// PgBouncer in transaction mode, one real SMTP server and one webhook receiver. A steady load from
// autocannon runs through the balancer with one signed-in user's access cookie (reads,
// purchase-request creations, each reported to the organization's webhook endpoint, and
// password-reset requests for that user, each mailed), while each instance in turn gets SIGTERM and
// is started again on its port. Each drains first (platform.server.drain-delay: not ready while
// still serving, until the balancer has taken it out), then finishes what is in flight, closes its
// keep-alive connections and exits 0: the load sees only 200, 201 and 202, no connection error and
// no timeout, and the session still refreshes. Once the outboxes drain, every creation was
// delivered to the endpoint exactly once and every reset request mailed exactly once, whichever
// instance took it and whichever delivered it. A session ended afterwards is refused at once by
// every restarted instance (their LISTEN connections came back with them).

const TIMEOUT_MS = 240_000
const NAMES = ['a', 'b', 'c'] as const

describe.skipIf(!usingPostgres() || !deploymentInstalled())(
  'three instances behind HAProxy and PgBouncer, each restarted under load',
  { timeout: TIMEOUT_MS },
  () => {
    let database: TestDatabase
    let deployment: Deployment
    let smtp: SmtpSink
    let receiver: WebhookReceiver
    let member: TestUser

    beforeAll(async () => {
      database = await createTestDatabase({ poolSize: 1 })
      ;[smtp, receiver] = await Promise.all([SmtpSink.start(), WebhookReceiver.start()])
      const config: ConfigSource = {
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.server.drain-delay': '2s',
        'platform.auth.cookie.secure': 'false',
        // Access cookies are checked against their session's state, which each instance caches for
        // an hour: only the NOTIFY of a revocation can end one sooner.
        'platform.auth.session-version.enabled': 'true',
        'platform.auth.revocation.fallback-ttl': '1h',
        'platform.mail.smtp.url': smtp.url,
        'platform.webhooks.allow-private-networks': 'true',
        'platform.auth.rate-limit.reset-per-minute': '1000000',
        'platform.auth.rate-limit.reset-per-hour': '1000000',
      }
      const seeding = await createTestApp({
        config: { ...config, 'platform.datasource.url': database.url },
        database,
      })
      try {
        const admin = await newActor(seeding.app, { role: 'admin' })
        member = await newUser(seeding.app, { organizationId: admin.user.organizationId })
        const endpoint = await asUser(seeding.app, admin.session, {
          method: 'POST',
          url: '/api/webhooks',
          payload: { url: `${receiver.url}/created`, eventTypes: ['purchase_request.created'] },
        })
        expect(endpoint.statusCode, endpoint.body).toBe(201)
      } finally {
        await seeding.close()
      }
      deployment = await startDeployment({
        directUrl: database.url as string,
        config,
        names: NAMES,
        haproxy: { interMs: 250, fall: 2, rise: 2 },
      })
    }, TIMEOUT_MS)

    afterAll(async () => {
      await deployment?.stop()
      await Promise.all([smtp?.close(), receiver?.close()])
      await database?.dispose()
    })

    it('answers every request of a steady load while each instance in turn drains, exits 0 and comes back, and mails and delivers each event once', async () => {
      const { cookie } = await signInAt(deployment.base, member.email, PASSWORD)
      const reset: autocannon.Request = {
        method: 'POST',
        path: '/api/auth/password-reset/request',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: member.email }),
      }
      const load = steadyLoad(deployment.base, cookie, 100, [LIST, CREATE, LIST, reset])
      for (const name of NAMES) await deployment.replace(name)
      const result = await load.stop()

      const answered = Object.fromEntries(load.statuses)
      console.log(
        `rolling restart under load: ${result.requests.total} requests, ${result.requests.average} req/s, ` +
          `p99 ${result.latency.p99} ms, answers ${JSON.stringify(answered)}; ${deployment.events.join(', ')}`,
      )
      expect(load.errors).toEqual([])
      expect(result.timeouts).toBe(0)
      expect(Object.keys(answered).sort()).toEqual(['200', '201', '202'])
      expect(result.non2xx).toBe(0)
      // Each instance was taken out by the balancer before it stopped accepting.
      expect(deployment.events).toEqual(
        NAMES.flatMap((name) => [`${name} taken out`, `${name} exited`, `${name} up`]),
      )

      // The session survives: its access cookie reads, and its refresh token rotates, on new instances.
      const sessions = await fetch(`${deployment.base}/api/auth/sessions`, { headers: { cookie } })
      expect(sessions.status).toBe(200)
      const refreshed = await fetch(`${deployment.base}/api/auth/refresh`, {
        method: 'POST',
        headers: { cookie },
      })
      expect(refreshed.status).toBe(200)

      // Exactly once: every purchase request created is one delivery to the endpoint, and every
      // message queued to the mail outbox one mail, once the instances' workers have drained the
      // outboxes (messages may be queued moments after their cause commits, so nothing is assumed at
      // response time). Requests in flight when the load stopped may have committed unanswered: at
      // most one per connection more than the answers counted.
      const creates = load.statuses.get(201) ?? 0
      const resets = load.statuses.get(202) ?? 0
      const rowsOf = async (query: ReturnType<typeof sql<{ id: string }>>) =>
        (await query.execute(database.handle.db)).rows.map((row) => row.id)
      const created = await rowsOf(
        sql`select id from purchase_requests where organization_id = ${member.organizationId}`,
      )
      expect(created.length - creates).toBeGreaterThanOrEqual(0)
      expect(created.length - creates).toBeLessThanOrEqual(4)
      const pending = async () => {
        const { rows } = await sql<{ count: string }>`
          select (select count(*) from mail_outbox where sent_at is null)
               + (select count(*) from webhook_outbox where delivered_at is null) as count`.execute(
          database.handle.db,
        )
        return Number(rows[0]?.count)
      }
      const waited = await pollUntil(
        `${created.length} webhook deliveries and at least ${resets} mails, and nothing left in the outboxes`,
        async () =>
          receiver.received.length >= created.length &&
          smtp.received.length >= resets &&
          (await pending()) === 0,
        90_000,
        200,
      )
      const queued = await rowsOf(sql`select message_id as id from mail_outbox`)
      expect(queued.length - resets).toBeGreaterThanOrEqual(0)
      expect(queued.length - resets).toBeLessThanOrEqual(4)
      const deliveries = receiver.to('/created')
      const webhookIds = new Set(deliveries.map((delivery) => delivery.headers['webhook-id']))
      const delivered = deliveries.map(
        (delivery) => (JSON.parse(delivery.body) as { data: { subject: { id: string } } }).data.subject.id,
      )
      const mailIds = new Set(smtp.messageIds())
      console.log(
        `exactly once: ${creates} creations answered, ${created.length} rows, ${deliveries.length} webhook deliveries ` +
          `(${webhookIds.size} webhook-ids); ${resets} reset requests answered, ${queued.length} mails queued, ` +
          `${smtp.received.length} received (${mailIds.size} Message-IDs); drained ${waited} ms after the load`,
      )
      expect(receiver.received.length).toBe(created.length)
      expect(webhookIds.size).toBe(created.length)
      expect(new Set(delivered)).toEqual(new Set(created))
      expect(smtp.received.length).toBe(queued.length)
      expect(mailIds).toEqual(new Set(queued))
      expect(smtp.received.every((raw) => raw.toString('utf8').includes(member.email))).toBe(true)
    })

    it('revokes, on every restarted instance, a session ended through the balancer', async () => {
      const { before, ended, kept } = await revocationOnEvery(deployment, member.email, PASSWORD)
      expect(before).toEqual([200, 200, 200])
      expect(ended).toBe(204)
      expect(kept).toEqual([200, 200, 200])
    })
  },
)
