import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { asUser, FAST_LOGIN_CONFIG, newActor, newUser, PASSWORD, type TestUser } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import {
  type Deployment,
  deliveredExactlyOnce,
  deliveryConfig,
  deploymentInstalled,
  readsCreatesAndResets,
  revocationOnEvery,
  signInAt,
  startDeployment,
  steadyLoad,
} from '../helpers/deployment.ts'
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
        ...deliveryConfig(smtp),
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
      const load = steadyLoad(deployment.base, cookie, 100, readsCreatesAndResets(member.email))
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
      // message queued to the mail outbox one mail, whichever instance took it and whichever delivered it.
      const once = await deliveredExactlyOnce({
        db: database.handle.db,
        organizationId: member.organizationId,
        load,
        receiver,
        path: '/created',
        smtp,
        email: member.email,
      })
      console.log(`exactly once: ${once.summary}`)
      expect(once.violations).toEqual([])
    })

    it('revokes, on every restarted instance, a session ended through the balancer', async () => {
      const { before, ended, kept } = await revocationOnEvery(deployment, member.email, PASSWORD)
      expect(before).toEqual([200, 200, 200])
      expect(ended).toBe(204)
      expect(kept).toEqual([200, 200, 200])
    })
  },
)
