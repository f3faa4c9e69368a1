import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'
import { type Kysely, sql } from 'kysely'
import type { ConfigSource } from '../../src/config.ts'
import type { Database } from '../../src/db/schema.ts'
import { type Haproxy, type HaproxyOptions, haproxyInstalled, startHaproxy } from './haproxy.ts'
import { type PgBouncer, pgbouncerInstalled, startPgBouncer } from './pgbouncer.ts'
import { pollUntil } from './poll.ts'
import { envOf, type ServiceProcess, startService } from './service-process.ts'
import type { SmtpSink } from './smtp-sink.ts'
import type { WebhookReceiver } from './webhook-receiver.ts'

// Deployed as in production, for the tests of test/deploy and the deployed bench and soak: `npm
// start` processes (src/server.ts) behind a real HAProxy that health-checks GET /health/ready, on
// one PostgreSQL database through a real PgBouncer in transaction mode (prepared statements off,
// LISTEN and migrations straight to PostgreSQL through platform.datasource.listen-url).

export const deploymentInstalled = (): boolean => haproxyInstalled() && pgbouncerInstalled()

export interface DeploymentOptions {
  /** The database, straight to PostgreSQL (`postgres://user@host:port/name`). */
  directUrl: string
  /** Configuration; the datasource entries of pooledDatasource unless it sets them itself. */
  config: ConfigSource
  /** The instances' names, which are HAProxy's server names. */
  names: readonly string[]
  /** The release the instances start as (another checkout's sources); this one by default. */
  root?: string
  /** The environment of instances started from `root`, from `env` below (default: `env` itself). */
  rootEnv?: (env: Record<string, string>) => Record<string, string>
  /** PgBouncer's server connections (default 8). */
  poolSize?: number
  haproxy?: Omit<HaproxyOptions, 'servers'>
  logLevel?: string
}

export interface Deployment {
  bouncer: PgBouncer
  haproxy: Haproxy
  /** The balancer's `http://127.0.0.1:<port>` */
  base: string
  names: readonly string[]
  instances: Map<string, ServiceProcess>
  /** The environment of an instance of this release, through the pooler. */
  env: Record<string, string>
  /** What happened during restarts, in order: `a taken out`, `a exited`, `a up`. */
  events: string[]
  instance(name: string): ServiceProcess
  /**
   * Replaces an instance: SIGTERM, and once the balancer has taken it out and it has exited (0, or
   * this throws with its output), starts `root` (this checkout by default) on its port and waits
   * for the balancer to see it UP. With `byHand`, the balancer is told first (runtime API, state
   * maint) and the instance gets SIGTERM once no request of the balancer's is open on it: a release
   * without a drain delay leaves that way.
   */
  replace(
    name: string,
    options?: { root?: string; env?: Record<string, string>; byHand?: boolean },
  ): Promise<void>
  stop(): Promise<void>
}

/** The datasource entries of an instance behind `bouncer`, LISTEN and migrations straight to `directUrl`. */
export function pooledDatasource(directUrl: string, bouncer: PgBouncer): ConfigSource {
  return {
    'platform.datasource.url': bouncer.urlOf(new URL(directUrl).pathname.slice(1)),
    'platform.datasource.prepared-statements': 'false',
    'platform.datasource.listen-url': directUrl,
    'platform.datasource.pool-size': '4',
  }
}

/** Starts PgBouncer, the instances one at a time (three cold starts at once on two cores only take longer), then HAProxy. */
export async function startDeployment(options: DeploymentOptions): Promise<Deployment> {
  const bouncer = await startPgBouncer({
    serverUrl: options.directUrl,
    poolMode: 'transaction',
    poolSize: options.poolSize ?? 8,
  })
  const env = {
    ...envOf({ ...pooledDatasource(options.directUrl, bouncer), ...options.config }),
    LOG_LEVEL: options.logLevel ?? process.env.DEPLOY_LOG_LEVEL ?? 'warn',
  }
  const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-deploy-'))
  const instances = new Map<string, ServiceProcess>()
  const events: string[] = []
  let haproxy: Haproxy | undefined
  const start = (name: string, root: string | undefined, startEnv: Record<string, string>, port?: number) =>
    startService({
      env: { ...startEnv, PLATFORM_DATA_DIR: path.join(dataDir, name) },
      ...(root === undefined ? {} : { root }),
      ...(port === undefined ? {} : { port }),
      readyWithinMs: 90_000,
    })
  const stop = async () => {
    await Promise.all([...instances.values()].map((instance) => instance.stop()))
    await haproxy?.stop()
    await bouncer.stop()
    await rm(dataDir, { recursive: true, force: true })
  }
  try {
    for (const name of options.names)
      instances.set(name, await start(name, options.root, options.rootEnv?.(env) ?? env))
    haproxy = await startHaproxy({
      ...options.haproxy,
      servers: options.names.map((name) => ({ name, port: (instances.get(name) as ServiceProcess).port })),
    })
    for (const name of options.names) await haproxy.sees(name, 'UP')
  } catch (error) {
    await stop()
    throw error
  }
  const balancer = haproxy
  const instance = (name: string) => {
    const found = instances.get(name)
    if (!found) throw new Error(`no instance ${name}`)
    return found
  }
  return {
    bouncer,
    haproxy: balancer,
    base: balancer.base,
    names: options.names,
    instances,
    env,
    events,
    instance,
    async replace(name, replacement = {}) {
      const old = instance(name)
      if (replacement.byHand) {
        await balancer.command(`set server instances/${name} state maint`)
        await balancer.sees(name, 'MAINT')
        await pollUntil(
          `no request open on ${name}`,
          async () => (await balancer.stats()).get(name)?.scur === '0',
          30_000,
        )
        events.push(`${name} taken out`)
      }
      const exited = old.stop().then((finished) => {
        events.push(`${name} exited`)
        return finished
      })
      if (!replacement.byHand) {
        await balancer.sees(name, 'DOWN')
        events.push(`${name} taken out`)
      }
      const finished = await exited
      if (finished.code !== 0) throw new Error(`${name} exited ${finished.code}:\n${old.output()}`)
      instances.set(name, await start(name, replacement.root, replacement.env ?? env, old.port))
      if (replacement.byHand) await balancer.command(`set server instances/${name} state ready`)
      await balancer.sees(name, 'UP', 90_000)
      events.push(`${name} up`)
    },
    stop,
  }
}

export interface SignedIn {
  /** `access_token=…; refresh_token=…` */
  cookie: string
  /** `access_token=…` alone */
  access: string
  sessionId: string
}

/** POST /api/auth/login at `base`; throws unless it answers 200. */
export async function signInAt(base: string, email: string, password: string): Promise<SignedIn> {
  const res = await fetch(`${base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: email, password }),
  })
  if (res.status !== 200) throw new Error(`login of ${email} answered ${res.status}: ${await res.text()}`)
  const { sessionId } = (await res.json()) as { sessionId: string }
  const pairs = res.headers.getSetCookie().map((line) => line.split(';')[0] as string)
  return {
    cookie: pairs.join('; '),
    access: pairs.find((pair) => pair.startsWith('access_token=')) as string,
    sessionId,
  }
}

export interface Load {
  statuses: Map<number, number>
  /** Connection errors, and the first 20 answers other than 2xx (method, path, status, body). */
  errors: string[]
  stop(): Promise<autocannon.Result>
}

/** A page of the organization's purchase requests. */
export const LIST: autocannon.Request = { method: 'GET', path: '/api/purchase-requests?limit=5' }
/** A purchase request created. */
export const CREATE: autocannon.Request = {
  method: 'POST',
  path: '/api/purchase-requests',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ title: 'Under a rolling restart' }),
}
/** The steady load's default requests: as many purchase-request lists as creations. */
export const READS_AND_CREATES: autocannon.Request[] = [LIST, CREATE]

/**
 * The load of the exactly-once checks (deliveredExactlyOnce): two lists, a creation (one
 * `purchase_request.created` webhook message each) and a password-reset request for `email` (one
 * mail each), in turn.
 */
export function readsCreatesAndResets(email: string): autocannon.Request[] {
  const reset: autocannon.Request = {
    method: 'POST',
    path: '/api/auth/password-reset/request',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email }),
  }
  return [LIST, CREATE, LIST, reset]
}

/**
 * The configuration of the exactly-once checks: mail to `smtp`, webhooks allowed to the receiver on
 * 127.0.0.1, and no limit on reset requests that the load could reach.
 */
export function deliveryConfig(smtp: SmtpSink): ConfigSource {
  return {
    'platform.mail.smtp.url': smtp.url,
    'platform.webhooks.allow-private-networks': 'true',
    'platform.auth.rate-limit.reset-per-minute': '1000000',
    'platform.auth.rate-limit.reset-per-hour': '1000000',
  }
}

/** The steady load's connections: at most this many requests are in flight when it stops. */
export const LOAD_CONNECTIONS = 4

/**
 * autocannon at a steady `rate` (requests per second over LOAD_CONNECTIONS) until stopped, each
 * request with the signed-in `cookie`, every answer counted by status, every error kept.
 */
export function steadyLoad(
  base: string,
  cookie: string,
  rate: number,
  requests: autocannon.Request[] = READS_AND_CREATES,
): Load {
  const statuses = new Map<number, number>()
  const errors: string[] = []
  let finished: (result: autocannon.Result) => void = () => {}
  const result = new Promise<autocannon.Result>((resolve) => {
    finished = resolve
  })
  const tracker = autocannon(
    {
      url: base,
      connections: LOAD_CONNECTIONS,
      overallRate: rate,
      duration: 3_600,
      timeout: 20,
      requests: requests.map((request) => ({
        ...request,
        headers: { ...request.headers, cookie },
        onResponse: (status: number, body: string) => {
          if ((status < 200 || status > 299) && errors.length < 20)
            errors.push(`${request.method} ${request.path} ${status} ${body.slice(0, 300)}`)
        },
      })),
    },
    (error, done) => {
      if (error) errors.push(String(error))
      finished(done)
    },
  )
  tracker.on('response', (_client, status) => statuses.set(status, (statuses.get(status) ?? 0) + 1))
  tracker.on('reqError', (error) => errors.push(error.message))
  return {
    statuses,
    errors,
    stop: () => {
      tracker.stop()
      return result
    },
  }
}

/**
 * Signs `email` in twice through the balancer, reads with each session on every instance directly,
 * ends the first session through the balancer with the second, and waits for every instance to
 * refuse it. The statuses of each step, instance by instance, for the test to assert.
 */
export async function revocationOnEvery(
  deployment: Deployment,
  email: string,
  password: string,
): Promise<{ before: number[]; ended: number; kept: number[] }> {
  const [revoked, kept] = [
    await signInAt(deployment.base, email, password),
    await signInAt(deployment.base, email, password),
  ]
  const onEach = (cookie: string) =>
    Promise.all(
      deployment.names.map(async (name) => {
        const res = await fetch(`${deployment.instance(name).base}/api/auth/sessions`, {
          headers: { cookie },
        })
        await res.arrayBuffer()
        return res.status
      }),
    )
  // Each instance now holds the session's state.
  const before = await onEach(revoked.access)
  const ended = await fetch(`${deployment.base}/api/auth/sessions/${revoked.sessionId}`, {
    method: 'DELETE',
    headers: { cookie: kept.access },
  })
  await ended.arrayBuffer()
  await pollUntil(
    'every instance refusing the revoked session',
    async () => (await onEach(revoked.access)).every((status) => status === 401),
    20_000,
  )
  return { before, ended: ended.status, kept: await onEach(kept.access) }
}

export interface ExactlyOnce {
  /** The figures, in one line for the test's log. */
  summary: string
  /**
   * Each way the deliveries differ from exactly once, in words and ids; empty when every purchase
   * request created was delivered to the endpoint once and every mail queued was received once.
   */
  violations: string[]
}

/**
 * After a readsCreatesAndResets load at an organization with one webhook endpoint for
 * `purchase_request.created` at `receiver`'s `path`: waits until nothing is left unchained in the
 * audit chains or undelivered in the outboxes and the receiver and `smtp` have had at least one
 * delivery per row and answer (messages are queued moments after their cause commits, so nothing
 * is assumed at response time), then compares. Every purchase request of the organization is
 * delivered to the endpoint once, by one message (distinct webhook-ids), and nothing else is; every
 * mail queued is received once (the received Message-IDs are the mail outbox's), each to `email`.
 * Requests in flight when the load stopped may have committed unanswered: rows and mails may be up
 * to LOAD_CONNECTIONS more than the 201 and 202 answers counted, never fewer.
 */
export async function deliveredExactlyOnce(options: {
  db: Kysely<Database>
  organizationId: string
  load: Load
  receiver: WebhookReceiver
  path: string
  smtp: SmtpSink
  email: string
}): Promise<ExactlyOnce> {
  const { db, load, receiver, smtp } = options
  const creates = load.statuses.get(201) ?? 0
  const resets = load.statuses.get(202) ?? 0
  const created = async () =>
    (
      await sql<{ id: string }>`
        select id from purchase_requests where organization_id = ${options.organizationId}`.execute(db)
    ).rows.map((row) => row.id)
  const pending = async () => {
    const { rows } = await sql<{ count: string }>`
      select (select count(*) from audit_events where sequence is null)
           + (select count(*) from mail_outbox where sent_at is null)
           + (select count(*) from webhook_outbox where delivered_at is null) as count`.execute(db)
    return Number(rows[0]?.count)
  }
  const waited = await pollUntil(
    'a webhook delivery per purchase request, a mail per reset request answered, nothing unchained or undelivered',
    async () =>
      receiver.received.length >= (await created()).length &&
      smtp.received.length >= resets &&
      (await pending()) === 0,
    90_000,
    200,
  )
  const rows = await created()
  const queued = (await sql<{ id: string }>`select message_id as id from mail_outbox`.execute(db)).rows.map(
    (row) => row.id,
  )
  const deliveries = receiver.to(options.path)
  const bodies = deliveries.map(
    (delivery) => JSON.parse(delivery.body) as { type: string; data: { subject: { id: string } | null } },
  )
  const delivered = bodies.map((body) => body.data.subject?.id ?? '')
  const webhookIds = new Set(deliveries.map((delivery) => String(delivery.headers['webhook-id'])))
  const mailIds = smtp.messageIds()

  const violations: string[] = []
  const unanswered = (what: string, count: number, answered: number) => {
    if (count < answered || count > answered + LOAD_CONNECTIONS)
      violations.push(`${count} ${what} for ${answered} answers (0 to ${LOAD_CONNECTIONS} more expected)`)
  }
  unanswered('purchase requests', rows.length, creates)
  unanswered('mails queued', queued.length, resets)
  const onceEach = (what: string, expected: string[], got: string[]) => {
    const times = new Map(expected.map((id) => [id, 0]))
    const unexpected = new Set<string>()
    for (const id of got) {
      const seen = times.get(id)
      if (seen === undefined) unexpected.add(id)
      else times.set(id, seen + 1)
    }
    const more = [...times].filter(([, n]) => n > 1).map(([id, n]) => `${id} × ${n}`)
    const none = [...times].filter(([, n]) => n === 0).map(([id]) => id)
    if (more.length > 0) violations.push(`${what} more than once: ${more.join(', ')}`)
    if (none.length > 0) violations.push(`${what} never: ${none.join(', ')}`)
    if (unexpected.size > 0) violations.push(`${what} unexpectedly: ${[...unexpected].join(', ')}`)
  }
  onceEach('purchase requests delivered', rows, delivered)
  // A subject delivered twice by one message was redelivered; by two, it was queued twice.
  const idsOf = new Map<string, string[]>()
  deliveries.forEach((delivery, i) => {
    const subject = delivered[i] as string
    idsOf.set(subject, [...(idsOf.get(subject) ?? []), String(delivery.headers['webhook-id'])])
  })
  for (const [subject, ids] of idsOf)
    if (ids.length > 1)
      violations.push(`purchase request ${subject} delivered with webhook-ids ${ids.join(', ')}`)
  onceEach('mails received', queued, mailIds)
  if (deliveries.length !== receiver.received.length)
    violations.push(
      `${receiver.received.length - deliveries.length} webhook deliveries elsewhere than ${options.path}`,
    )
  if (webhookIds.size !== deliveries.length)
    violations.push(`${deliveries.length} webhook deliveries with ${webhookIds.size} distinct webhook-ids`)
  const types = new Set(bodies.map((body) => body.type))
  if ([...types].some((type) => type !== 'purchase_request.created'))
    violations.push(`webhook deliveries of types ${[...types].join(', ')}`)
  const elsewhere = smtp.received.filter((raw) => !raw.toString('utf8').includes(options.email)).length
  if (elsewhere > 0) violations.push(`${elsewhere} mails not to ${options.email}`)

  return {
    summary:
      `${creates} creations answered, ${rows.length} rows, ${deliveries.length} webhook deliveries ` +
      `(${webhookIds.size} webhook-ids); ${resets} reset requests answered, ${queued.length} mails queued, ` +
      `${smtp.received.length} received (${new Set(mailIds).size} Message-IDs); drained ${waited} ms after the load`,
    violations,
  }
}
