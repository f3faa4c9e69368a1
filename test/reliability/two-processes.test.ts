import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { APPROVAL_EMAIL_SUBJECT_KEY } from '../../src/features/purchase-requests/approval.ts'
import { FAST_LOGIN_CONFIG, newOrganization, newUser, PASSWORD, type TestUser } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import { pollUntil } from '../helpers/poll.ts'
import { startTestS3, type TestS3 } from '../helpers/s3.ts'
import { envOf, type ServiceProcess, startService } from '../helpers/service-process.ts'
import { SmtpSink } from '../helpers/smtp-sink.ts'

// Two instances on one database as they are deployed: two service processes
// (src/server.ts, as `npm start` runs it) on one PostgreSQL, one SMTP server and one S3 store,
// behind a "load balancer" that is this test (it spreads requests over both and sets
// X-Forwarded-For, which the services trust from loopback). A background load runs over both for
// the whole file: users signing in and rotating their strict refresh-token chains, reading, asking
// for password resets (mail through both outbox workers). Each guarantee is checked while that
// load runs. The in-process variant of the same checks is two-instances.test.ts.

interface Reply {
  status: number
  cookies: string[]
  // biome-ignore lint/suspicious/noExplicitAny: answers of several shapes, read field by field
  body: any
}

/** A browser of one user: its cookie jar and its address, talking to whichever instance it is told. */
class Browser {
  access = ''
  refresh = ''
  sessionId = ''
  readonly address: string

  constructor(address: string) {
    this.address = address
  }

  async call(base: string, method: string, url: string, body?: unknown): Promise<Reply> {
    const res = await fetch(`${base}${url}`, {
      method,
      headers: {
        'x-forwarded-for': this.address,
        cookie: `access_token=${this.access}; refresh_token=${this.refresh}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    })
    const text = await res.text()
    const reply: Reply = {
      status: res.status,
      cookies: res.headers.getSetCookie(),
      body: text ? JSON.parse(text) : null,
    }
    for (const line of reply.cookies) {
      const [pair = ''] = line.split(';')
      const [name, value = ''] = pair.split('=')
      if (name === 'access_token') this.access = value
      if (name === 'refresh_token') this.refresh = value
    }
    return reply
  }

  async login(base: string, user: TestUser): Promise<Reply> {
    const reply = await this.call(base, 'POST', '/api/auth/login', {
      username: user.email,
      password: PASSWORD,
    })
    if (reply.status === 200) this.sessionId = reply.body.sessionId
    return reply
  }
}

const within = (ms: number, what: string, probe: () => Promise<boolean>) => pollUntil(what, probe, ms)

describe.skipIf(!usingPostgres())('two service processes on one database, under load', () => {
  let database: TestDatabase
  let s3: TestS3
  let smtp: SmtpSink
  let a: ServiceProcess
  let b: ServiceProcess
  let organizationId: string
  let admin: TestUser
  let creator: TestUser
  const loadUsers: TestUser[] = []
  const load = {
    running: true,
    statuses: new Map<string, number>(),
    unexpected: [] as string[],
    loops: [] as Promise<void>[],
  }

  beforeAll(async () => {
    ;[database, s3, smtp] = await Promise.all([
      createTestDatabase({ poolSize: 3 }),
      startTestS3(),
      SmtpSink.start(),
    ])
    // One deployment: the same configuration, the JWT secret included.
    const config: ConfigSource = {
      ...FAST_LOGIN_CONFIG,
      'platform.profile': 'test',
      'platform.auth.jwt.secret': testSecret(),
      'platform.datasource.url': database.url,
      'platform.datasource.pool-size': '5',
      'platform.server.trust-proxy': '127.0.0.1',
      'platform.auth.rate-limit.login-per-minute': '4',
      'platform.auth.rate-limit.refresh-per-minute': '100000',
      'platform.auth.rate-limit.reset-per-hour': '100000',
      'platform.mail.smtp.url': smtp.url,
      'platform.web.frontend-url': 'https://app.example.test',
      ...s3.config,
    }
    const seeding = await createTestApp({ config, database })
    try {
      organizationId = await newOrganization(seeding.app)
      admin = await newUser(seeding.app, { organizationId, role: 'admin' })
      creator = await newUser(seeding.app, { organizationId })
      for (let i = 0; i < 6; i++) loadUsers.push(await newUser(seeding.app, { organizationId }))
    } finally {
      await seeding.close()
    }
    const env = { ...envOf(config), LOG_LEVEL: 'warn' }
    ;[a, b] = await Promise.all([startService({ env }), startService({ env })])

    // The load: each user signs in on one instance and rotates on alternate ones, reads, and asks
    // for a reset now and then; anything but the documented answer is recorded.
    load.loops = loadUsers.map(async (user, index) => {
      const browser = new Browser(`203.0.113.${index + 1}`)
      const note = (what: string, reply: Reply, expected: number) => {
        const key = `${what} ${reply.status}`
        load.statuses.set(key, (load.statuses.get(key) ?? 0) + 1)
        if (reply.status !== expected) load.unexpected.push(`${key} ${JSON.stringify(reply.body)}`)
      }
      note('login', await browser.login(index % 2 ? b.base : a.base, user), 200)
      for (let round = 0; load.running; round++) {
        const here = round % 2 ? a.base : b.base
        note('refresh', await browser.call(here, 'POST', '/api/auth/refresh'), 200)
        note('sessions', await browser.call(here, 'GET', '/api/auth/sessions'), 200)
        note(
          'list',
          await browser.call(round % 2 ? b.base : a.base, 'GET', '/api/purchase-requests?limit=5'),
          200,
        )
        // Three at most: resets share the per-address login budget (4 a minute here).
        if (round % 10 === 0 && round < 30) {
          note(
            'reset',
            await browser.call(here, 'POST', '/api/auth/password-reset/request', { email: user.email }),
            202,
          )
        }
      }
    })
  }, 120_000)

  /** Messages queued and neither sent nor given up yet. */
  const unsentMail = async () =>
    Number(
      (
        await database.handle.db
          .selectFrom('mail_outbox')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .where('sent_at', 'is', null)
          .where('failed_at', 'is', null)
          .executeTakeFirstOrThrow()
      ).n,
    )

  afterAll(async () => {
    load.running = false
    await Promise.all(load.loops)
    await Promise.all([a?.stop(), b?.stop()])
    await Promise.all([smtp?.close(), s3?.close()])
    await database?.dispose()
  })

  it('shares the per-IP login limit: failures on both count against one budget', async () => {
    // Six failed logins from one address, alternately on A and B, each for another unknown account
    // (the per-account limit stays out of it): one budget of four, the fifth and sixth refused;
    // per-instance budgets would refuse none. The limit counts in fixed windows of the clock's
    // minutes, so a round that straddles a minute's end is counted in two windows: another round,
    // from another address, is then tried.
    const expected = [401, 401, 401, 401, 429, 429]
    let round = 0
    let statuses: number[] = []
    await within(60_000, 'a round of six failures counted against one budget', async () => {
      round += 1
      const attacker = new Browser(`198.51.100.${100 + round}`)
      statuses = []
      for (const [i, base] of [a.base, b.base, a.base, b.base, a.base, b.base].entries()) {
        const reply = await attacker.call(base, 'POST', '/api/auth/login', {
          username: `nobody-${round}-${i}@example.com`,
          password: 'wrong',
        })
        statuses.push(reply.status)
      }
      return statuses.join() === expected.join()
    }).catch((error: Error) => {
      throw new Error(`${error.message}; the last round answered ${statuses.join(', ')}`)
    })
    expect(statuses).toEqual(expected)
  })

  it('refuses on one instance a session logged out on the other, and revokes for both on a reuse', async () => {
    const owner = new Browser('203.0.113.50')
    expect((await owner.login(a.base, creator)).status).toBe(200)
    expect((await owner.call(a.base, 'POST', '/api/auth/logout')).status).toBe(204)
    expect((await owner.call(b.base, 'POST', '/api/auth/refresh')).status).toBe(401)

    const victim = new Browser('203.0.113.51')
    expect((await victim.login(b.base, creator)).status).toBe(200)
    const stolen = victim.refresh
    expect((await victim.call(b.base, 'POST', '/api/auth/refresh')).status).toBe(200)
    const thief = new Browser('198.51.100.9')
    thief.refresh = stolen
    const replay = await thief.call(a.base, 'POST', '/api/auth/refresh')
    expect(replay.status).toBe(401)
    expect(replay.body.code).toBe('REFRESH_TOKEN_REUSED')
    // The replay on A revoked the session the owner holds, on B as well.
    expect((await victim.call(b.base, 'POST', '/api/auth/refresh')).status).toBe(401)
  })

  it('uses on one instance a configuration change made on the other', async () => {
    const adminBrowser = new Browser('203.0.113.60')
    const creatorBrowser = new Browser('203.0.113.61')
    expect((await adminBrowser.login(a.base, admin)).status).toBe(200)
    expect((await creatorBrowser.login(a.base, creator)).status).toBe(200)
    const configUrl = `/api/organizations/${organizationId}/config/${APPROVAL_EMAIL_SUBJECT_KEY}`
    /**
     * Creates, submits and approves a request on B while A is frozen (SIGSTOP), so that B's mail
     * worker sends the approval email and renders its subject from B's cache; the subject.
     */
    const approveOnB = async (title: string): Promise<string> => {
      a.child.kill('SIGSTOP')
      try {
        const created = await creatorBrowser.call(b.base, 'POST', '/api/purchase-requests', { title })
        expect(created.status).toBe(201)
        const id = created.body.id
        const submitted = await creatorBrowser.call(b.base, 'POST', `/api/purchase-requests/${id}/submit`)
        expect(submitted.status).toBe(200)
        const approved = await adminBrowser.call(b.base, 'POST', `/api/purchase-requests/${id}/approve`)
        expect(approved.status).toBe(200)
        let subject = ''
        await within(15_000, `the approval email of ${title}`, async () => {
          const mail = smtp.received.map((raw) => raw.toString('utf8')).find((text) => text.includes(title))
          subject = /^Subject: (.*)$/im.exec(mail ?? '')?.[1] ?? ''
          return mail !== undefined
        })
        return subject
      } finally {
        a.child.kill('SIGCONT')
      }
    }
    const put = (value: string) => adminBrowser.call(a.base, 'PUT', configUrl, { value })
    expect((await put('Before {title}')).status).toBe(200)
    // B reads the value, and caches it.
    expect(await approveOnB('warm-cache-1')).toBe('Before warm-cache-1')
    expect(await approveOnB('warm-cache-2')).toBe('Before warm-cache-2')
    expect((await put('After {title}')).status).toBe(200)
    // B keeps a value until it is told of a change (no expiry): an approval on B renders the new
    // subject only once A's change reached it. How soon is the benchmark's to measure.
    let round = 0
    let latest = ''
    await within(30_000, 'the new subject on B', async () => {
      round += 1
      latest = await approveOnB(`after-change-${round}`)
      return latest === `After after-change-${round}`
    }).catch((error: Error) => {
      throw new Error(`${error.message}; the last approval on B had the subject "${latest}"`)
    })
    expect(latest).toBe(`After after-change-${round}`)
  }, 120_000)

  it('approves once of 50 parallel approvals split across both: one APPROVED, one audit row, one email', async () => {
    const adminBrowser = new Browser('203.0.113.70')
    const creatorBrowser = new Browser('203.0.113.71')
    expect((await adminBrowser.login(b.base, admin)).status).toBe(200)
    expect((await creatorBrowser.login(a.base, creator)).status).toBe(200)
    const title = `fifty-approvals-${Date.now()}`
    const created = await creatorBrowser.call(a.base, 'POST', '/api/purchase-requests', { title })
    const id = created.body.id
    expect((await creatorBrowser.call(b.base, 'POST', `/api/purchase-requests/${id}/submit`)).status).toBe(
      200,
    )
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        adminBrowser.call(i % 2 ? b.base : a.base, 'POST', `/api/purchase-requests/${id}/approve`),
      ),
    )
    const statuses = answers.map((reply) => reply.status)
    expect(statuses.filter((s) => s === 200)).toHaveLength(1)
    expect(statuses.filter((s) => s === 409)).toHaveLength(49)
    const events =
      await sql`select 1 from purchase_request_events where purchase_request_id = ${id} and action = 'approve'`.execute(
        database.handle.db,
      )
    expect(events.rows).toHaveLength(1)
    const mails = () => smtp.received.filter((raw) => raw.toString('utf8').includes(title)).length
    await within(15_000, 'the approval email', async () => mails() >= 1)
    // Both workers are polling and listening: still one message.
    await within(15_000, 'an empty mail outbox', async () => (await unsentMail()) === 0)
    expect(mails()).toBe(1)
  }, 60_000)

  it('delivers each outbox message exactly once with both workers running, and the load saw only documented answers', async () => {
    load.running = false
    await Promise.all(load.loops)
    const counts = Object.fromEntries(load.statuses)
    process.stdout.write(`two processes, load answers: ${JSON.stringify(counts)}\n`)
    expect(load.unexpected).toEqual([])
    expect(counts['refresh 200']).toBeGreaterThan(20)
    expect(counts['reset 202']).toBeGreaterThan(5)
    await within(30_000, 'every queued message sent', async () => (await unsentMail()) === 0)
    const sent = await database.handle.db
      .selectFrom('mail_outbox')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('sent_at', 'is not', null)
      .executeTakeFirstOrThrow()
    const ids = smtp.messageIds()
    expect(new Set(ids).size).toBe(ids.length)
    expect(ids.length).toBe(Number(sent.n))
  }, 60_000)
})
