import path from 'node:path'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ChainKeys, verifyStoredChain } from '../../src/audit/index.ts'
import { auditChainSecrets, type ConfigSource, loadConfig } from '../../src/config.ts'
import { FAST_LOGIN_CONFIG, PASSWORD } from '../helpers/accounts.ts'
import { testSecret } from '../helpers/app.ts'
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
import { type ExportedRelease, exportRelease, previousRelease } from '../helpers/previous-release.ts'
import { runNode } from '../helpers/process.ts'
import { envOf } from '../helpers/service-process.ts'
import { SmtpSink } from '../helpers/smtp-sink.ts'
import { WebhookReceiver } from '../helpers/webhook-receiver.ts'

// A rolling upgrade as deployed (test/helpers/deployment.ts): three instances of the previous
// release (test/helpers/previous-release.ts) behind a real HAProxy, on one PostgreSQL database, one
// real SMTP server and one webhook receiver, under a steady load through the balancer of a
// signed-in user's reads, purchase-request creations (each reported to a webhook endpoint the
// organization's admin made on the previous release) and password-reset requests (each mailed).
// Each instance in turn is taken out of the balancer (its runtime API: the previous release may have
// no drain delay), stopped once nothing is open on it, and replaced by this release on its port,
// through PgBouncer in transaction mode. The first of them applies the newer
// migrations while two old instances still serve on the schema. The load sees only 200, 201 and
// 202, no connection error and no timeout; the session still refreshes. Once the outboxes drain,
// every creation was delivered to the endpoint exactly once and every reset request mailed exactly
// once, whichever release wrote it and whichever delivered it: the previous release queues a
// webhook message in the transaction that writes the audit event, this one when its chainer links
// the event moments after commit (src/audit/chainer.ts). Every audit chain then verifies as `audit
// verify` does, from 1 to its head without a gap, nothing unchained, though both releases appended
// to it. A session ended at the end is refused by every instance.
//
// A previous release that predates platform.datasource.listen-url cannot run behind a transaction
// pooler (its LISTEN connection would hear nothing, and its migrator's session lock would stay
// behind on a pooled server connection): it connects straight to PostgreSQL, as it was deployed.

const TIMEOUT_MS = 240_000
const NAMES = ['a', 'b', 'c'] as const

describe.skipIf(!usingPostgres() || !deploymentInstalled())(
  'a rolling upgrade behind HAProxy: the previous release replaced instance by instance under load',
  { timeout: TIMEOUT_MS },
  () => {
    let database: TestDatabase
    let smtp: SmtpSink
    let receiver: WebhookReceiver
    let release: ExportedRelease | undefined
    let deployment: Deployment
    let oldEnv: Record<string, string>
    let before: string[]
    let config: ConfigSource

    const migrations = async () =>
      (
        await sql<{ name: string }>`select name from kysely_migration order by name`.execute(
          database.handle.db,
        )
      ).rows.map((row) => row.name)

    /** Each chain holding events, with its head row and the verification of `audit verify`. */
    const chainsVerified = async () => {
      const db = database.handle.db
      const keys = ChainKeys.derivedFrom(auditChainSecrets(loadConfig(config)))
      const { rows } = await sql<{ chain: string; sequence: string | null; hash: string | null }>`
        select e.chain, h.sequence, h.hash
        from (select distinct chain from audit_events) e left join audit_chain_heads h on h.chain = e.chain
        order by e.chain`.execute(db)
      return Promise.all(
        rows.map(async (row) => ({
          chain: row.chain,
          head: { sequence: Number(row.sequence), hash: row.hash },
          report: await verifyStoredChain(db, keys, row.chain),
        })),
      )
    }

    beforeAll(async () => {
      const commit = await previousRelease()
      expect(commit, 'the previous release needs the git history (not a shallow clone)').toBeTruthy()
      release = await exportRelease(commit as string)
      database = await createTestDatabase({ migrated: false, poolSize: 1 })
      ;[smtp, receiver] = await Promise.all([SmtpSink.start(), WebhookReceiver.start()])
      const direct = database.url as string
      config = {
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.server.drain-delay': '2s',
        'platform.auth.cookie.secure': 'false',
        // Only the NOTIFY of a revocation ends a session's cached state before an hour.
        'platform.auth.session-version.enabled': 'true',
        'platform.auth.revocation.fallback-ttl': '1h',
        ...deliveryConfig(smtp),
      }
      // It is given only the properties it knows: a release refuses configuration it does not.
      const pooled = release.variables.has('PLATFORM_DATASOURCE_LISTEN_URL')
      oldEnv = release.envFor({
        ...envOf({ ...config, 'platform.datasource.url': direct, 'platform.datasource.pool-size': '4' }),
        LOG_LEVEL: 'warn',
      })
      deployment = await startDeployment({
        directUrl: direct,
        config,
        names: NAMES,
        root: release.root,
        rootEnv: (env) => (pooled ? (release?.envFor(env) ?? env) : oldEnv),
        haproxy: { interMs: 250, fall: 2, rise: 2 },
      })
      before = await migrations()
    }, TIMEOUT_MS)

    afterAll(async () => {
      await deployment?.stop()
      await Promise.all([smtp?.close(), receiver?.close()])
      await database?.dispose()
      await release?.remove()
    })

    it('answers every request while each old instance is replaced and the first new one migrates, and mails and delivers each event once', async () => {
      // An organization, its admin and a member, made by the previous release's CLI.
      const cli = async (args: string[], stdin?: string) => {
        const root = (release as ExportedRelease).root
        const { code, stdout, stderr } = await runNode(
          path.join(root, 'src/cli.ts'),
          args,
          { ...oldEnv, PLATFORM_DATA_DIR: path.join(root, `cli-${args[0]}`) },
          stdin,
        ).done
        expect(code, stderr).toBe(0)
        return JSON.parse(stdout) as Record<string, string>
      }
      const { organizationId } = await cli(['org', 'create', '--name', 'Upgraded'])
      const userCreate = (email: string, role: string) =>
        cli(
          [
            'user',
            'create',
            '--org',
            organizationId as string,
            '--email',
            email,
            '--role',
            role,
            '--password-stdin',
          ],
          `${PASSWORD}\n`,
        )
      const email = 'balanced-upgrade@example.com'
      const adminEmail = 'balanced-upgrade-admin@example.com'
      await userCreate(email, 'member')
      await userCreate(adminEmail, 'admin')
      // The webhook endpoint, made on the previous release (so without the position this release
      // notes on the endpoints it makes).
      const admin = await signInAt(deployment.base, adminEmail, PASSWORD)
      const endpoint = await fetch(`${deployment.base}/api/webhooks`, {
        method: 'POST',
        headers: { cookie: admin.access, 'content-type': 'application/json' },
        body: JSON.stringify({ url: `${receiver.url}/created`, eventTypes: ['purchase_request.created'] }),
      })
      expect(endpoint.status, await endpoint.text()).toBe(201)
      const { cookie } = await signInAt(deployment.base, email, PASSWORD)

      const load = steadyLoad(deployment.base, cookie, 60, readsCreatesAndResets(email))
      const migratedAfter: Record<string, number> = {}
      for (const name of NAMES) {
        await deployment.replace(name, { byHand: true })
        migratedAfter[name] = (await migrations()).length
      }
      const result = await load.stop()

      const answered = Object.fromEntries(load.statuses)
      const after = await migrations()
      console.log(
        `rolling upgrade behind the balancer from ${release?.commit} (${before.length} → ${after.length} migrations): ` +
          `${result.requests.total} requests, ${result.requests.average} req/s, p99 ${result.latency.p99} ms, ` +
          `answers ${JSON.stringify(answered)}; ${deployment.events.join(', ')}`,
      )
      expect(load.errors).toEqual([])
      expect(result.timeouts).toBe(0)
      expect(Object.keys(answered).sort()).toEqual(['200', '201', '202'])
      expect(result.non2xx).toBe(0)
      expect(deployment.events).toEqual(
        NAMES.flatMap((name) => [`${name} taken out`, `${name} exited`, `${name} up`]),
      )
      // The first instance of this release applied the newer migrations, with b and c still old.
      expect(after.length).toBeGreaterThan(before.length)
      expect(after.slice(0, before.length)).toEqual(before)
      expect(migratedAfter).toEqual({ a: after.length, b: after.length, c: after.length })

      // The session made on the old release reads and refreshes on the new one.
      const sessions = await fetch(`${deployment.base}/api/auth/sessions`, { headers: { cookie } })
      expect(sessions.status).toBe(200)
      const refreshed = await fetch(`${deployment.base}/api/auth/refresh`, {
        method: 'POST',
        headers: { cookie },
      })
      expect(refreshed.status).toBe(200)

      // Exactly once across the upgrade: each purchase request created is one delivery to the
      // endpoint whichever release wrote its event (and so queued its message), and each mail
      // queued one mail whichever release sent it.
      const once = await deliveredExactlyOnce({
        db: database.handle.db,
        organizationId: organizationId as string,
        load,
        receiver,
        path: '/created',
        smtp,
        email,
      })
      // Which release queued each creation's message: an event the writing transaction chained
      // itself (the previous release) was never updated after, so it has the purchase request's
      // xmin; one this release's chainer linked later has the chainer's.
      const { rows: queuedBy } = await sql<{ writer: string; chainer: string }>`
        select count(*) filter (where e.xmin = p.xmin) as writer,
          count(*) filter (where not e.xmin = p.xmin) as chainer
        from purchase_requests p
        join audit_events e on e.subject_id = p.id::text and e.type = 'purchase_request.created'
        where p.organization_id = ${organizationId}`.execute(database.handle.db)
      const split = { writer: Number(queuedBy[0]?.writer), chainer: Number(queuedBy[0]?.chainer) }
      console.log(
        `exactly once across the upgrade: ${once.summary}; ${split.writer} messages queued by the writing transaction, ${split.chainer} by the chainer`,
      )
      expect(once.violations).toEqual([])
      // Across the chainer's arrival both ways of queueing took part.
      if (!before.includes('0032_audit_chainer'))
        expect(split.writer > 0 && split.chainer > 0, JSON.stringify(split)).toBe(true)

      // Gapless across the chain's change of hands: every chain the deployment wrote to verifies as
      // `audit verify` does, from sequence 1 to its head without a gap, nothing left unchained.
      const chains = await chainsVerified()
      const described = chains.map(({ chain, report }) =>
        report.ok
          ? `${chain}: ${report.events} events verified, ${report.unchained} unchained`
          : `${chain}: broken at ${report.sequence} (${report.reason})`,
      )
      console.log(`audit chains after the upgrade: ${described.join('; ')}`)
      expect(chains.map((chain) => chain.chain)).toContain(organizationId)
      for (const { chain, head, report } of chains)
        expect(report, chain).toEqual({ ok: true, events: head.sequence, head, unchained: 0 })

      const revocation = await revocationOnEvery(deployment, email, PASSWORD)
      expect(revocation).toEqual({ before: [200, 200, 200], ended: 204, kept: [200, 200, 200] })
    })
  },
)
