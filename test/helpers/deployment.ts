import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'
import type { ConfigSource } from '../../src/config.ts'
import { type Haproxy, type HaproxyOptions, haproxyInstalled, startHaproxy } from './haproxy.ts'
import { type PgBouncer, pgbouncerInstalled, startPgBouncer } from './pgbouncer.ts'
import { pollUntil } from './poll.ts'
import { envOf, type ServiceProcess, startService } from './service-process.ts'

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
 * autocannon at a steady `rate` (requests per second over 4 connections) until stopped, each
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
      connections: 4,
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
