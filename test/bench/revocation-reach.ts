import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { createOrganization } from '../../src/features/organizations/index.ts'
import { inProcessApp } from './in-process-app.ts'

// How long a revocation takes to reach another instance: two service processes A and B on the
// bench's database, both trusting what they cached for an hour (platform.auth.revocation.fallback-ttl),
// so that B's 401 can only come from the NOTIFY published in the revoking transaction. Each trial
// has B serve the credential once (200, now cached), revokes it, and from the moment the revocation
// returns asks B, one request at a time, until it answers 401. API keys are revoked through
// `apiKeys.revoke` of an app built in this process, as `npm run cli -- api-key revoke` does;
// sessions through DELETE /api/auth/sessions/{id} on A.

export const REVOCATION_REACH = 'revocation reach'
/** What the figures are compared with: B refuses within this time at the 99th percentile. */
export const REACH_GOAL_P99_MS = 100

const TRIALS = Number(process.env.BENCH_REVOCATION_TRIALS ?? 100)
/** A trial that waits longer than this for B's 401 fails the run. */
const GIVE_UP_MS = 10_000
const PASSWORD = 'revocation-reach-password-0123'

export interface Instance {
  url: string
  child: { kill(signal?: NodeJS.Signals): boolean }
  done: Promise<unknown>
}

export interface ReachFigure {
  name: string
  trials: number
  p50: number
  p99: number
  max: number
  /** Answers of B to the revoked credential other than 200 (not reached yet) and the final 401. */
  unexpected: Map<number, number>
  /** The trials in which B gave any of them. */
  trialsWithUnexpected: number
}

/** Nearest-rank percentile of ascending `sorted`. */
const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? Number.NaN

async function status(url: string, init: RequestInit = {}): Promise<number> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(10_000) })
  await res.arrayBuffer()
  return res.status
}

/** The trials of one kind of credential: how long each took, and what else than 200 and 401 B said. */
class Trials {
  readonly samples: number[] = []
  readonly unexpected = new Map<number, number>()
  trialsWithUnexpected = 0

  /**
   * Asks B until it answers 401 and records the milliseconds from `since`. Statuses other than
   * 200 and 401 are counted: a revoked credential is refused with 401, never 403.
   */
  async firstRefusal(ask: () => Promise<number>, since: number): Promise<void> {
    let unexpected = false
    for (;;) {
      const answer = await ask()
      const now = performance.now()
      if (answer === 401) {
        this.samples.push(now - since)
        if (unexpected) this.trialsWithUnexpected += 1
        return
      }
      if (answer !== 200) {
        unexpected = true
        this.unexpected.set(answer, (this.unexpected.get(answer) ?? 0) + 1)
      }
      if (now - since > GIVE_UP_MS)
        throw new Error(`B did not refuse a revoked credential within ${GIVE_UP_MS} ms`)
    }
  }

  figure(name: string): ReachFigure {
    const sorted = [...this.samples].sort((x, y) => x - y)
    return {
      name,
      trials: sorted.length,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      max: sorted.at(-1) ?? Number.NaN,
      unexpected: this.unexpected,
      trialsWithUnexpected: this.trialsWithUnexpected,
    }
  }
}

async function apiKeyTrials(app: FastifyInstance, b: Instance, organizationId: string): Promise<ReachFigure> {
  const trials = new Trials()
  for (let trial = 0; trial < TRIALS; trial++) {
    const key = await app.services.apiKeys.create({
      organizationId,
      scopes: ['purchase_requests:read'],
      description: `revocation reach ${trial}`,
      expiresAt: null,
    })
    // A route that checks the key's membership, whose tuple goes in the revoking transaction.
    const ask = () => status(`${b.url}/api/purchase-requests`, { headers: { 'x-api-key': key.rawKey } })
    const served = await ask()
    if (served !== 200) throw new Error(`B answered ${served} to a fresh API key`)
    await app.services.apiKeys.revoke(key.id)
    await trials.firstRefusal(ask, performance.now())
  }
  return trials.figure('API key, revoked in-process as the CLI does → B 401')
}

async function sessionTrials(a: Instance, b: Instance, email: string): Promise<ReachFigure> {
  const trials = new Trials()
  for (let trial = 0; trial < TRIALS; trial++) {
    const login = await fetch(`${a.url}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: email, password: PASSWORD }),
    })
    if (login.status !== 200) throw new Error(`login on A failed: ${login.status} ${await login.text()}`)
    const { sessionId } = (await login.json()) as { sessionId: string }
    const access = login.headers
      .getSetCookie()
      .map((line) => line.split(';')[0] ?? '')
      .find((pair) => pair.startsWith('access_token='))
    const headers = { cookie: access ?? '' }
    const ask = () => status(`${b.url}/api/auth/sessions`, { headers })
    const served = await ask()
    if (served !== 200) throw new Error(`B answered ${served} to a fresh session`)
    const revoked = await status(`${a.url}/api/auth/sessions/${sessionId}`, { method: 'DELETE', headers })
    if (revoked !== 204) throw new Error(`DELETE /api/auth/sessions/{id} on A answered ${revoked}`)
    await trials.firstRefusal(ask, performance.now())
  }
  return trials.figure('session, DELETE /api/auth/sessions/{id} on A → B 401')
}

/**
 * Runs the trials against two processes `start` launches with `env` (the bench's, on PostgreSQL)
 * plus a fallback TTL of an hour and session versions; closes everything it started.
 */
export async function measureRevocationReach(
  env: Record<string, string>,
  dataDir: string,
  start: (env: Record<string, string>) => Promise<Instance>,
): Promise<ReachFigure[]> {
  const reachEnv = {
    ...env,
    PLATFORM_AUTH_REVOCATION_FALLBACK_TTL: '1h',
    PLATFORM_AUTH_SESSION_VERSION_ENABLED: 'true',
  }
  // The revoking app of this process; it migrates the database before A and B start on it.
  const { app, close } = await inProcessApp(reachEnv, dataDir, 'reach-revoker')
  const started: Instance[] = []
  try {
    const organizationId = (await createOrganization(app.db, { name: 'Revocation reach' })).id
    const email = 'revocation-reach@example.test'
    await app.services.users.create({ organizationId, email, role: 'member', password: PASSWORD })
    // Their own data directories: two launchers starting at once on one race for its S3 port.
    const launch = async (name: string) => {
      const instance = await start({ ...reachEnv, PLATFORM_DATA_DIR: path.join(dataDir, name) })
      started.push(instance)
      return instance
    }
    const [a, b] = await Promise.all([launch('reach-a'), launch('reach-b')])
    return [await apiKeyTrials(app, b, organizationId), await sessionTrials(a, b, email)]
  } finally {
    for (const instance of started) instance.child.kill('SIGTERM')
    await Promise.all(started.map((instance) => instance.done.catch(() => undefined)))
    await close()
  }
}

/** The figure's line: `revocation reach (…): p50 … ms  p99 … ms  max … ms  (N trials; goal …)`. */
export function reachLine(row: ReachFigure): string {
  const met = row.p99 <= REACH_GOAL_P99_MS ? 'met' : 'MISSED'
  return `${REVOCATION_REACH} (${row.name}): p50 ${row.p50.toFixed(1)} ms  p99 ${row.p99.toFixed(1)} ms  max ${row.max.toFixed(1)} ms  (${row.trials} trials; goal p99 <= ${REACH_GOAL_P99_MS} ms: ${met})`
}
