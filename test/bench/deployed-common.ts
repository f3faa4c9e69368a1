// What `npm run bench:deployed` (deployed.ts) and `npm run soak:deployed` (soak-deployed.ts) share: a
// database of their own on the PostgreSQL server BENCH_DATABASE_URL (or TEST_DATABASE_URL) names,
// organizations and members made with the CLI, and a closed-loop mixed load (two purchase-request
// lists for each creation) from autocannon, one tracker per signed-in member, every answer's status
// and latency handed to the caller.
import { randomBytes } from 'node:crypto'
import autocannon from 'autocannon'
import type { ConfigSource } from '../../src/config.ts'
import { CREATE, LIST, signInAt } from '../helpers/deployment.ts'
import { adminQuery, databaseUrl } from '../helpers/postgres-admin.ts'
import { runNode } from '../helpers/process.ts'
import { envOf } from '../helpers/service-process.ts'

export const PASSWORD = 'deployed-bench-password-0123'

/**
 * The instances' configuration of the deployed bench and soak: cheap password hashing and no login
 * or refresh limits (their load signs in every minute), the default pool of 10 per instance
 * (PgBouncer, not the instances, bounds what PostgreSQL sees), and a fresh JWT secret per run.
 */
export function deployedConfig(extra: ConfigSource = {}): ConfigSource {
  return {
    'platform.profile': 'test',
    'platform.auth.jwt.secret': randomBytes(32).toString('base64'),
    'platform.auth.cookie.secure': 'false',
    'platform.auth.password.hash-memory-kib': '1024',
    'platform.auth.password.hash-iterations': '1',
    'platform.auth.rate-limit.login-per-minute': '100000',
    'platform.auth.rate-limit.refresh-per-minute': '100000',
    'platform.datasource.pool-size': '10',
    ...extra,
  }
}

export function benchServer(script: string): string {
  const server = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL
  if (!server) {
    process.stderr.write(`${script} needs PostgreSQL: set BENCH_DATABASE_URL or TEST_DATABASE_URL\n`)
    process.exit(2)
  }
  return server
}

/** A new database on `server`, migrated, with `organizations` × `members` accounts; `drop` removes it. */
export async function seededDatabase(
  server: string,
  prefix: string,
  config: ConfigSource,
  organizations: number,
  members: number,
): Promise<{ url: string; emails: string[]; drop(): Promise<void> }> {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`
  await adminQuery(server, `create database ${name}`)
  const url = databaseUrl(server, name)
  const drop = () => adminQuery(server, `drop database if exists ${name} with (force)`)
  try {
    const env = { ...envOf({ ...config, 'platform.datasource.url': url }), LOG_LEVEL: 'error' }
    const cli = async (args: string[]) => {
      const done = await runNode('src/cli.ts', args, env).done
      if (done.code !== 0) throw new Error(`cli ${args.join(' ')} failed: ${done.stderr}`)
      return done.stdout
    }
    await cli(['migrate'])
    const emails: string[] = []
    for (let o = 0; o < organizations; o++) {
      const { organizationId } = JSON.parse(await cli(['org', 'create', '--name', `Deployed ${o}`]))
      for (let m = 0; m < members; m++) {
        const email = `deployed-${o}-${m}@example.test`
        await cli([
          'user',
          'create',
          '--org',
          organizationId,
          '--email',
          email,
          '--role',
          'member',
          '--password',
          PASSWORD,
        ])
        emails.push(email)
      }
    }
    return { url, emails, drop }
  } catch (error) {
    await drop()
    throw error
  }
}

/** Signs each member in at `base`: their cookies. */
export async function signInAll(base: string, emails: string[]): Promise<string[]> {
  const cookies: string[] = []
  for (const email of emails) cookies.push((await signInAt(base, email, PASSWORD)).cookie)
  return cookies
}

export interface MixedLoad {
  /** Resolves when every tracker has finished (after `seconds`, or once stopped). */
  done: Promise<void>
  stop(): Promise<void>
}

/**
 * `connections` closed-loop connections in all, spread over the members' cookies, each looping over
 * two lists and one creation, for `seconds`.
 */
export function mixedLoad(
  base: string,
  cookies: string[],
  connections: number,
  seconds: number,
  onResponse: (status: number, ms: number) => void,
  onError: (error: Error) => void = () => {},
): MixedLoad {
  const trackers = cookies.map((cookie, i) => {
    const share = Math.floor(connections / cookies.length) + (i < connections % cookies.length ? 1 : 0)
    let finished: () => void = () => {}
    const done = new Promise<void>((resolve) => {
      finished = resolve
    })
    if (share === 0) return { done: Promise.resolve(), stop: () => {} }
    const tracker = autocannon(
      {
        url: base,
        connections: share,
        duration: seconds,
        timeout: 30,
        requests: [LIST, LIST, CREATE].map((request) => ({
          ...request,
          headers: { ...request.headers, cookie },
        })),
      },
      (error) => {
        if (error) onError(error)
        finished()
      },
    )
    tracker.on('response', (_client, status, _bytes, ms) => onResponse(status, ms))
    tracker.on('reqError', onError)
    return { done, stop: () => tracker.stop() }
  })
  const done = Promise.all(trackers.map((tracker) => tracker.done)).then(() => {})
  return {
    done,
    stop: () => {
      for (const tracker of trackers) tracker.stop()
      return done
    },
  }
}

export const percentile = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0
