import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../src/config.ts'
import { FAST_LOGIN_CONFIG } from './helpers/accounts.ts'
import { testSecret } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from './helpers/database.ts'
import { runNode } from './helpers/process.ts'
import { envOf, type ServiceProcess, startService } from './helpers/service-process.ts'

// Revocations reach every instance: two service processes A and B (src/server.ts, as `npm start`
// runs it) on one PostgreSQL database, and the operations CLI beside them. B first serves the
// credential, so it holds it in its caches; the credential is then revoked by the CLI or through A,
// and B refuses it with 401. Both run with a fallback TTL of an hour, so nothing but the NOTIFY
// published in the revoking transaction (src/security/revocation.ts) can explain B's 401. B is asked
// from before the revocation starts until it refuses, one request at a time: at no moment may the
// dead credential be answered with 403 (its authorization tuples go in the same transaction while B
// may still hold the credential), and a credential that was not revoked keeps its 200 on B.
// Real processes sharing one database need PostgreSQL: on the embedded database the file is skipped
// (another process reaches it through its holder's socket, which delivers no notifications).

const TIMEOUT_MS = 90_000
/** A bound for B to hear of a revocation once it returned, far above what it takes: not a latency assertion. */
const REFUSED_WITHIN_MS = 20_000
const PASSWORD = 'a long enough passphrase'

type Headers = Record<string, string>

let database: TestDatabase
let dataDir: string
let env: Record<string, string>
let a: ServiceProcess
let b: ServiceProcess
let organizationId: string
let accounts = 0
let cliRuns = 0

/**
 * One CLI command as operators run it; its JSON answer, failing the test unless it exits 0. Each
 * run has a data directory of its own: commands run side by side here, and two launchers starting
 * at once on one directory race for its embedded S3 port.
 */
async function cli(args: string[], stdin?: string): Promise<Record<string, string>> {
  cliRuns += 1
  const { code, stdout, stderr } = await runNode(
    'src/cli.ts',
    args,
    { ...env, PLATFORM_DATA_DIR: path.join(dataDir, `cli-${cliRuns}`) },
    stdin,
  ).done
  expect(code, stderr).toBe(0)
  return JSON.parse(stdout)
}

function call(service: ServiceProcess, headers: Headers, method: string, url: string, body?: unknown) {
  return fetch(`${service.base}${url}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(10_000),
  })
}

async function status(
  service: ServiceProcess,
  headers: Headers,
  method: string,
  url: string,
  body?: unknown,
) {
  const res = await call(service, headers, method, url, body)
  await res.arrayBuffer()
  return res.status
}

/** `user create` through the CLI, a member unless told; the account's id and email. */
async function newAccount(role: 'admin' | 'member' = 'member') {
  accounts += 1
  const email = `revocation-${accounts}@example.com`
  const { userId } = await cli(
    ['user', 'create', '--org', organizationId, '--email', email, '--role', role, '--password-stdin'],
    `${PASSWORD}\n`,
  )
  return { userId: userId as string, email }
}

/** Signs in on A; the session and the access cookie that carries it. */
async function signIn(email: string): Promise<{ sessionId: string; headers: Headers }> {
  const res = await call(a, {}, 'POST', '/api/auth/login', { username: email, password: PASSWORD })
  expect(res.status).toBe(200)
  const { sessionId } = (await res.json()) as { sessionId: string }
  const access = res.headers
    .getSetCookie()
    .map((line) => line.split(';')[0] as string)
    .find((pair) => pair.startsWith('access_token='))
  return { sessionId, headers: { cookie: access as string } }
}

/**
 * Asks B (`ask`, one request at a time) from now until it answers 401, while `revoke` runs; what B
 * answered on the way, as runs of one status ("200×412 → 401×1"). Prints how long after `revoke`
 * returned B first refused (negative when B refused before the revoking call had returned to this
 * test), for information only.
 */
async function refusedByB(what: string, ask: () => Promise<number>, revoke: () => Promise<unknown>) {
  const runs: { status: number; count: number }[] = []
  let refusedAt = 0
  // Set once the revocation returned: B must refuse within REFUSED_WITHIN_MS of that. Until then
  // there is no bound (the CLI's own start-up, slow beside a loaded machine's other files, is not
  // what this measures); abandoned when the revocation failed.
  let returnedAt: number | undefined
  let abandoned = false
  const refused = (async () => {
    for (;;) {
      const answer = await ask()
      const last = runs.at(-1)
      if (last?.status === answer) last.count += 1
      else runs.push({ status: answer, count: 1 })
      if (answer === 401) {
        refusedAt = performance.now()
        return
      }
      if (abandoned) return
      if (returnedAt !== undefined && performance.now() - returnedAt > REFUSED_WITHIN_MS)
        throw new Error(`B refusing ${what}: not within ${REFUSED_WITHIN_MS} ms of the revocation`)
      await new Promise((resolve) => setTimeout(resolve, 1))
    }
  })()
  try {
    await revoke()
  } catch (error) {
    // The poller stops; the revocation's failure is the one worth reading.
    abandoned = true
    await refused.catch(() => undefined)
    throw error
  }
  returnedAt = performance.now()
  await refused
  const answers = runs.map((run) => `${run.status}×${run.count}`).join(' → ')
  console.log(
    `revocation reach (${what}): B's first 401 ${(refusedAt - returnedAt).toFixed(1)} ms after the revocation returned; B answered ${answers}`,
  )
  return answers
}

/** The credential served until the revocation reached B, then refused: never a 403 on the way. */
const SERVED_THEN_REFUSED = /^(200×\d+ → )?401×1$/

describe.skipIf(!usingPostgres())(
  'revocations reach another service process on the same database',
  { timeout: TIMEOUT_MS },
  () => {
    beforeAll(async () => {
      database = await createTestDatabase({ poolSize: 1 })
      dataDir = await mkdtemp(path.join(tmpdir(), 'platform-revocation-'))
      // One deployment: the same configuration, the JWT secret included.
      const config: ConfigSource = {
        ...FAST_LOGIN_CONFIG,
        'platform.profile': 'test',
        'platform.auth.jwt.secret': testSecret(),
        'platform.datasource.url': database.url,
        'platform.datasource.pool-size': '5',
        'platform.auth.revocation.fallback-ttl': '1h',
        'platform.auth.session-version.enabled': 'true',
      }
      env = { ...envOf(config), LOG_LEVEL: 'warn' }
      // Each its own data directory: two launchers starting at once on one race for its S3 port.
      const start = (name: string) =>
        startService({ env: { ...env, PLATFORM_DATA_DIR: path.join(dataDir, name) }, readyWithinMs: 60_000 })
      ;[a, b] = await Promise.all([start('a'), start('b')])
      organizationId = (await cli(['org', 'create', '--name', 'Revocations'])).organizationId as string
    }, TIMEOUT_MS)

    afterAll(async () => {
      await Promise.all([a?.stop(), b?.stop()])
      await database?.dispose()
      if (dataDir) await rm(dataDir, { recursive: true, force: true })
    })

    it('refuses on B, with 401, an API key the CLI revoked; another key keeps working there', async () => {
      const create = (description: string) =>
        cli([
          'api-key',
          'create',
          '--org',
          organizationId,
          '--scopes',
          'purchase_requests:read',
          '--description',
          description,
        ])
      const [revoked, kept] = await Promise.all([create('revoked'), create('kept')])
      // The key's membership tuple is deleted in the revoking transaction: were B to keep the key a
      // moment longer, this route would answer 403.
      const list = (key: Record<string, string>) => () =>
        status(b, { 'x-api-key': key.rawKey as string }, 'GET', '/api/purchase-requests')
      expect(await list(revoked)()).toBe(200)
      expect(await list(kept)()).toBe(200)

      const answers = await refusedByB('API key, revoked by the CLI', list(revoked), () =>
        cli(['api-key', 'revoke', '--id', revoked.id as string]),
      )
      expect(answers).toMatch(SERVED_THEN_REFUSED)
      expect(await list(revoked)()).toBe(401)
      expect(await list(kept)()).toBe(200)
    })

    it("refuses on B, with 401, a disabled service account's bearer token; another account's keeps working there", async () => {
      const create = (clientId: string) =>
        cli([
          'service-account',
          'create',
          '--client-id',
          clientId,
          '--scopes',
          'authz:check',
          '--description',
          'a backend',
        ])
      const [disabled, kept] = await Promise.all([create('revoked-backend'), create('kept-backend')])
      const tokenOf = async (account: Record<string, string>) => {
        const res = await call(a, {}, 'POST', '/api/auth/service-token', {
          clientId: account.clientId,
          clientSecret: account.clientSecret,
        })
        expect(res.status).toBe(200)
        return ((await res.json()) as { accessToken: string }).accessToken
      }
      const check = (token: string) => () =>
        status(b, { authorization: `Bearer ${token}` }, 'POST', '/api/authz/check', {
          relation: 'member',
          objectType: 'organization',
          objectId: organizationId,
        })
      const [disabledToken, keptToken] = await Promise.all([tokenOf(disabled), tokenOf(kept)])
      expect(await check(disabledToken)()).toBe(200)
      expect(await check(keptToken)()).toBe(200)

      const answers = await refusedByB('service account, disabled by the CLI', check(disabledToken), () =>
        cli(['service-account', 'disable', '--client-id', 'revoked-backend']),
      )
      expect(answers).toMatch(SERVED_THEN_REFUSED)
      expect(await check(keptToken)()).toBe(200)
    })

    it("refuses on B, with 401, the access cookie of a user who logged out everywhere on A; another user's keeps working there", async () => {
      const [leaving, staying] = await Promise.all([newAccount(), newAccount()])
      const [session, other] = await Promise.all([signIn(leaving.email), signIn(staying.email)])
      const sessions = (headers: Headers) => () => status(b, headers, 'GET', '/api/auth/sessions')
      expect(await sessions(session.headers)()).toBe(200)
      expect(await sessions(other.headers)()).toBe(200)

      const answers = await refusedByB('logout-all on A', sessions(session.headers), async () => {
        expect(await status(a, session.headers, 'POST', '/api/auth/logout-all')).toBe(204)
      })
      expect(answers).toMatch(SERVED_THEN_REFUSED)
      expect(await sessions(other.headers)()).toBe(200)
    })

    it("refuses on B, with 401, a session revoked on A; the same user's other session keeps working there", async () => {
      const user = await newAccount()
      const [revoked, kept] = await Promise.all([signIn(user.email), signIn(user.email)])
      const sessions = (headers: Headers) => () => status(b, headers, 'GET', '/api/auth/sessions')
      expect(await sessions(revoked.headers)()).toBe(200)
      expect(await sessions(kept.headers)()).toBe(200)

      const answers = await refusedByB('one session, revoked on A', sessions(revoked.headers), async () => {
        expect(await status(a, kept.headers, 'DELETE', `/api/auth/sessions/${revoked.sessionId}`)).toBe(204)
      })
      expect(answers).toMatch(SERVED_THEN_REFUSED)
      expect(await sessions(kept.headers)()).toBe(200)
    })

    it("refuses on B, with 401, a member an admin deactivated on A, on a route that checks membership; the admin's cookie keeps working there", async () => {
      const [admin, member] = await Promise.all([newAccount('admin'), newAccount()])
      const [adminSession, memberSession] = await Promise.all([signIn(admin.email), signIn(member.email)])
      // The member's role tuple is deleted in the deactivating transaction: were B to keep the
      // session a moment longer, this route would answer 403.
      const list = (headers: Headers) => () => status(b, headers, 'GET', '/api/purchase-requests')
      expect(await list(memberSession.headers)()).toBe(200)
      expect(await list(adminSession.headers)()).toBe(200)

      const answers = await refusedByB('member deactivated on A', list(memberSession.headers), async () => {
        expect(await status(a, adminSession.headers, 'POST', `/api/users/${member.userId}/deactivate`)).toBe(
          200,
        )
      })
      expect(answers).toMatch(SERVED_THEN_REFUSED)
      expect(await list(adminSession.headers)()).toBe(200)
    })

    it('refuses on B, with 401, a member the CLI deactivated; another member keeps working there', async () => {
      const [leaving, staying] = await Promise.all([newAccount(), newAccount()])
      const [leavingSession, stayingSession] = await Promise.all([
        signIn(leaving.email),
        signIn(staying.email),
      ])
      const list = (headers: Headers) => () => status(b, headers, 'GET', '/api/purchase-requests')
      expect(await list(leavingSession.headers)()).toBe(200)
      expect(await list(stayingSession.headers)()).toBe(200)

      const answers = await refusedByB('member deactivated by the CLI', list(leavingSession.headers), () =>
        cli(['user', 'deactivate', '--id', leaving.userId]),
      )
      expect(answers).toMatch(SERVED_THEN_REFUSED)
      expect(await list(stayingSession.headers)()).toBe(200)
    })
  },
)
