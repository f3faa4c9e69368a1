import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import path from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import autocannon from 'autocannon'
import { exportPKCS8, generateKeyPair } from 'jose'
import { loadConfig } from '../../src/config.ts'
import { freePort } from '../../src/lifecycle.ts'
import { AccessTokens } from '../../src/security/tokens.ts'
import { runNode } from '../helpers/process.ts'

// OAuth 2.0 for machines under load, in one run so the figures are ratios of each other: the form
// token endpoint (client_secret_basic) against the JSON endpoint on one service process, and
// against Ory Hydra's client-credentials grant on the same machine (a bench-only binary, built
// from its Go module: `npm run bench` skips that row with the reason when it is absent); then the
// cost of verifying an ES256 and an EdDSA access token against HS256, in this process, each token
// seen once (the service caches verified tokens, so a repeated token costs a lookup whatever its
// algorithm).

export const OAUTH2 = 'machine tokens: token endpoints and signature verification'

/** Where test/bench/hydra-build.sh puts the binary (HYDRA_BIN overrides). */
export const HYDRA_BIN = process.env.HYDRA_BIN ?? path.join(homedir(), '.cache/platform-core/hydra-bin/hydra')
const VERIFICATIONS = Number(process.env.BENCH_VERIFICATIONS ?? 5000)

interface Started {
  url: string
  child: ChildProcess
  done: Promise<unknown>
}

interface Throughput {
  name: string
  rps: number
  p50: number
  p99: number
  unexpected: number
}

async function load(
  name: string,
  options: autocannon.Options,
  duration: number,
  expectStatus = 200,
): Promise<Throughput> {
  await autocannon({ ...options, duration: 1 })
  const result = await autocannon({ ...options, duration })
  const stats = (result as unknown as { statusCodeStats: Record<string, { count: number }> }).statusCodeStats
  const total = Object.values(stats).reduce((sum, s) => sum + s.count, 0)
  const expected = stats[String(expectStatus)]?.count ?? 0
  return {
    name,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    unexpected: total - expected + result.errors + result.timeouts,
  }
}

const basic = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`

/** Hydra in memory, its admin API creating one client-credentials client; null with the reason when it cannot run. */
async function startHydra(
  extraEnv: Record<string, string> = {},
): Promise<
  { url: string; clientId: string; clientSecret: string; stop(): Promise<void> } | { skipped: string }
> {
  if (!existsSync(HYDRA_BIN)) {
    return {
      skipped: `no Ory Hydra binary at ${HYDRA_BIN} (build it with bash test/bench/hydra-build.sh; bench only, never in CI)`,
    }
  }
  const [publicPort, adminPort] = [await freePort(), await freePort()]
  const url = `http://127.0.0.1:${publicPort}`
  const admin = `http://127.0.0.1:${adminPort}`
  const child = spawn(HYDRA_BIN, ['serve', 'all', '--dev', '--sqa-opt-out'], {
    env: {
      PATH: process.env.PATH ?? '',
      DSN: 'memory',
      SECRETS_SYSTEM: randomUUID().replaceAll('-', ''),
      URLS_SELF_ISSUER: url,
      SERVE_PUBLIC_HOST: '127.0.0.1',
      SERVE_PUBLIC_PORT: String(publicPort),
      SERVE_ADMIN_HOST: '127.0.0.1',
      SERVE_ADMIN_PORT: String(adminPort),
      LOG_LEVEL: 'error',
      ...extraEnv,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8')
  })
  const done = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const stop = async () => {
    child.kill('SIGTERM')
    await done
  }
  for (let attempt = 0; attempt < 300; attempt++) {
    const up = await fetch(`${admin}/health/ready`).then(
      (r) => r.ok,
      () => false,
    )
    if (up) break
    if (child.exitCode !== null) return { skipped: `Ory Hydra exited: ${stderr.slice(0, 400)}` }
    await delay(100)
  }
  const created = await fetch(`${admin}/admin/clients`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      grant_types: ['client_credentials'],
      token_endpoint_auth_method: 'client_secret_basic',
      scope: 'files:read',
    }),
  }).catch(() => null)
  if (!created?.ok) {
    await stop()
    return { skipped: `Ory Hydra's admin API did not create a client (${created?.status ?? 'no answer'})` }
  }
  const client = (await created.json()) as { client_id: string; client_secret: string }
  // Hydra makes its signing key on the first token it issues (seconds of RSA key generation): one
  // token before the clock runs.
  const first = await fetch(`${url}/oauth2/token`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      authorization: basic(client.client_id, client.client_secret),
    },
    body: 'grant_type=client_credentials',
    signal: AbortSignal.timeout(120_000),
  }).catch(() => null)
  if (first?.status !== 200) {
    await stop()
    return { skipped: `Ory Hydra did not issue a first token (${first?.status ?? 'no answer'})` }
  }
  return { url, clientId: client.client_id, clientSecret: client.client_secret, stop }
}

/** The three token endpoints, one after the other, at the same connections and duration. */
export async function measureTokenEndpoints(
  appEnv: Record<string, string>,
  start: (env: Record<string, string>) => Promise<Started>,
  connections: number,
  duration: number,
): Promise<string[]> {
  const env = { ...appEnv, PLATFORM_AUTH_RATE_LIMIT_SERVICE_TOKEN_PER_MINUTE: '1000000000' }
  const clientId = `bench-oauth-${randomUUID().slice(0, 8)}`
  const created = await runNode(
    'src/cli.ts',
    [
      'service-account',
      'create',
      '--client-id',
      clientId,
      '--scopes',
      'files:read',
      '--description',
      'bench',
    ],
    env,
  ).done
  if (created.code !== 0) throw new Error(`creating the bench service account failed: ${created.stderr}`)
  const { clientSecret } = JSON.parse(created.stdout) as { clientSecret: string }
  const form = 'application/x-www-form-urlencoded'
  const rows: Throughput[] = []
  const app = await start(env)
  try {
    rows.push(
      await load(
        'POST /api/auth/service-token (JSON)',
        {
          url: `${app.url}/api/auth/service-token`,
          method: 'POST',
          connections,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ clientId, clientSecret }),
        },
        duration,
      ),
    )
    rows.push(
      await load(
        'POST /oauth2/token (form, client_secret_basic)',
        {
          url: `${app.url}/oauth2/token`,
          method: 'POST',
          connections,
          headers: { 'content-type': form, authorization: basic(clientId, clientSecret) },
          body: 'grant_type=client_credentials',
        },
        duration,
      ),
    )
  } finally {
    app.child.kill('SIGTERM')
    await app.done
  }
  const lines = rows.map(
    (row) =>
      `${row.name}: ${row.rps.toFixed(0)} req/s, p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms${row.unexpected ? `, ${row.unexpected} unexpected answers` : ''}`,
  )
  const [json, token] = rows as [Throughput, Throughput]
  lines.push(`token endpoint against the JSON endpoint: ${(token.rps / json.rps).toFixed(2)} of its req/s`)
  // Hydra's default access tokens are opaque (HMAC, stored); its JWT ones, what the service issues,
  // are RS256 with a 4096-bit RSA key.
  for (const [label, extraEnv] of [
    ['opaque access tokens, its default', { STRATEGIES_ACCESS_TOKEN: 'opaque' }],
    ['JWT access tokens, RS256', { STRATEGIES_ACCESS_TOKEN: 'jwt' }],
  ] as const) {
    const hydra = await startHydra(extraEnv)
    if ('skipped' in hydra) {
      lines.push(`Ory Hydra v2.3.0 client-credentials grant: skipped, ${hydra.skipped}`)
      return lines
    }
    try {
      const row = await load(
        `Ory Hydra v2.3.0 POST /oauth2/token (in-memory DSN, client_secret_basic, ${label})`,
        {
          url: `${hydra.url}/oauth2/token`,
          method: 'POST',
          connections,
          headers: { 'content-type': form, authorization: basic(hydra.clientId, hydra.clientSecret) },
          body: 'grant_type=client_credentials',
        },
        duration,
      )
      lines.push(
        `${row.name}: ${row.rps.toFixed(0)} req/s, p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms${row.unexpected ? `, ${row.unexpected} unexpected answers` : ''}`,
        `token endpoint against Ory Hydra (${label}): ${(token.rps / row.rps).toFixed(2)} of its req/s`,
      )
    } finally {
      await hydra.stop()
    }
  }
  return lines
}

/** Microseconds per verification of a token seen for the first time, per algorithm, and the ratios to HS256. */
export async function measureVerification(): Promise<string[]> {
  const clock = { now: () => new Date() }
  const es = await generateKeyPair('ES256', { extractable: true })
  const ed = await generateKeyPair('EdDSA', { extractable: true })
  const configs = {
    HS256: {},
    ES256: {
      'platform.auth.jwt.algorithm': 'ES256',
      'platform.auth.jwt.signing-key': await exportPKCS8(es.privateKey),
    },
    EdDSA: {
      'platform.auth.jwt.algorithm': 'EdDSA',
      'platform.auth.jwt.signing-key': await exportPKCS8(ed.privateKey),
    },
  }
  const micros: Record<string, number> = {}
  for (const [algorithm, overrides] of Object.entries(configs)) {
    const config = loadConfig({
      'platform.profile': 'test',
      'platform.auth.jwt.secret': randomBytes(32).toString('base64'),
      ...overrides,
    })
    const tokens = new AccessTokens(config, clock)
    const issued = Array.from(
      { length: VERIFICATIONS },
      (_, i) => tokens.issueServiceToken({ sub: randomUUID(), cid: `bench-${i}`, scope: 'files:read' }).token,
    )
    // Warm-up on tokens of their own, so the measured ones are all first sightings.
    for (let i = 0; i < 200; i++)
      tokens.verifyServiceToken(tokens.issueServiceToken({ sub: randomUUID(), cid: 'w', scope: '' }).token)
    const started = process.hrtime.bigint()
    let verified = 0
    for (const token of issued) if (tokens.verifyServiceToken(token)) verified++
    const elapsed = Number(process.hrtime.bigint() - started) / 1000
    if (verified !== issued.length)
      throw new Error(`${algorithm}: ${issued.length - verified} tokens did not verify`)
    micros[algorithm] = elapsed / issued.length
  }
  const hs = micros.HS256 as number
  return [
    `verification of a token seen once (${VERIFICATIONS} tokens each, one core of this process): ` +
      Object.entries(micros)
        .map(([algorithm, us]) => `${algorithm} ${us.toFixed(1)} µs`)
        .join(', '),
    `ES256 against HS256: ${((micros.ES256 as number) / hs).toFixed(1)}x the cost; EdDSA against HS256: ${((micros.EdDSA as number) / hs).toFixed(1)}x`,
  ]
}
