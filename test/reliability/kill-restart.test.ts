import { randomBytes, randomInt } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConfigSource } from '../../src/config.ts'
import { sha256 } from '../../src/security/tokens.ts'
import type { S3ObjectStore } from '../../src/storage/s3.ts'
import { FAST_LOGIN_CONFIG, newOrganization, newUser, PASSWORD } from '../helpers/accounts.ts'
import { createTestApp, testSecret } from '../helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from '../helpers/database.ts'
import { pollUntil } from '../helpers/poll.ts'
import { startTestS3, type TestS3 } from '../helpers/s3.ts'
import { envOf, type ServiceProcess, startService } from '../helpers/service-process.ts'
import { SmtpSink } from '../helpers/smtp-sink.ts'

// A kill -9 under load: the service (src/server.ts, its own process, real PostgreSQL, the S3 server
// and a real SMTP server of this test) is SIGKILLed at a random moment of a mixed workload, 20
// times, and restarted on the same database. Four admins of one organization run, each in a loop:
// logins, refreshes of their strict token chain, logouts, purchase-request creates, submits and
// approvals (which queue an email), uploads (initiate, PUT to the store, confirm), PDF reports,
// invitations, admin-triggered and self-service resets (which queue email). After each restart, by
// SQL and against the store:
// - every session has one consistent refresh-token chain: exactly one token not rotated, each
//   rotated token followed by the successor created in the same statement, a revoked session has no
//   usable token and a live one's current token is not revoked;
// - every CONFIRMED file's object is in the store, with the recorded size;
// - every purchase request has its ownership tuple (and its outbox record), and an audit row per
//   transition that matches its status; every approval queued exactly one email;
// - every invitation or reset token queued its email in the same transaction; no outbox row is lost,
//   the restarted worker delivers every row it may, and a row the killed worker held is only held
//   until its lease (5 minutes) runs out;
// - what the service acknowledged before the kill is there: created requests, transitions,
//   confirmations, invitations, resets, sessions, and the refresh token a client was last given.
// The randomness (operations, kill moments) comes from one seed, printed; KILL_RESTART_SEED=<n>
// replays it.

const ROUNDS = 20
const CLIENTS = 4
const MAIL_LEASE_MS = 5 * 60_000
const FRONTEND = 'https://app.example.test'

/** mulberry32: a small seeded generator, so a failing run can be replayed. */
function generator(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface Reply {
  status: number
  headers: Headers
  // biome-ignore lint/suspicious/noExplicitAny: answers of many shapes, read field by field
  body: any
}

/** The connection broke (the service was killed): whether the request took effect is unknown. */
class Interrupted extends Error {}

function cookieOf(reply: Reply, name: string): string | undefined {
  for (const line of reply.headers.getSetCookie()) {
    const match = new RegExp(`^${name}=([^;]*)`).exec(line)
    if (match?.[1]) return match[1]
  }
  return undefined
}

/** What the service acknowledged, shared by the clients; checked after every restart. */
class Ledger {
  /** Purchase requests by id: the last acknowledged status, and whether a later move is in doubt. */
  readonly requests = new Map<string, { status: string; doubtful: boolean; creator: number }>()
  /** Files whose confirmation (or report) was acknowledged: id -> size. */
  readonly confirmed = new Map<string, number>()
  /** Uploads whose bytes are in the store but whose confirm was cut off: confirmed after restart. */
  readonly toConfirm = new Set<string>()
  /** Acknowledged invitations: email -> user id. */
  readonly invited = new Map<string, string>()
  /** Acknowledged admin-triggered resets: the target and when the request was sent. */
  readonly adminResets: { userId: string; sentAt: Date }[] = []
  /** Sessions whose login was acknowledged. */
  readonly sessions = new Set<string>()
  readonly unexpected: string[] = []
  readonly counts = new Map<string, number>()
  count(what: string) {
    this.counts.set(what, (this.counts.get(what) ?? 0) + 1)
  }
}

class Client {
  access = ''
  refresh = ''
  sessionId = ''
  /** False after a refresh or login whose answer was lost: the token held may be rotated or absent. */
  tokenCertain = false
  readonly index: number
  readonly email: string
  readonly organizationId: string
  readonly ledger: Ledger
  base = ''
  readonly random: () => number

  constructor(index: number, email: string, organizationId: string, ledger: Ledger, seed: number) {
    this.index = index
    this.email = email
    this.organizationId = organizationId
    this.ledger = ledger
    this.random = generator(seed)
  }

  async call(method: string, url: string, body?: unknown, cookies = true): Promise<Reply> {
    let res: Response
    let text: string
    try {
      res = await fetch(`${this.base}${url}`, {
        method,
        headers: {
          ...(cookies ? { cookie: `access_token=${this.access}; refresh_token=${this.refresh}` } : {}),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(20_000),
      })
      text = await res.text()
    } catch (error) {
      throw new Interrupted(`${method} ${url}: ${(error as Error).message}`)
    }
    let parsed: unknown = null
    try {
      parsed = text ? JSON.parse(text) : null
    } catch {
      parsed = text
    }
    return { status: res.status, headers: res.headers, body: parsed }
  }

  expect(reply: Reply, what: string, statuses: number[]): boolean {
    if (statuses.includes(reply.status)) return true
    this.ledger.unexpected.push(`client ${this.index} ${what}: ${reply.status} ${JSON.stringify(reply.body)}`)
    return false
  }

  pick<T>(items: T[]): T | undefined {
    return items.length === 0 ? undefined : items[Math.floor(this.random() * items.length)]
  }

  async login(): Promise<void> {
    this.tokenCertain = false
    const reply = await this.call(
      'POST',
      '/api/auth/login',
      { username: this.email, password: PASSWORD },
      false,
    )
    if (!this.expect(reply, 'login', [200])) return
    this.access = cookieOf(reply, 'access_token') ?? ''
    this.refresh = cookieOf(reply, 'refresh_token') ?? ''
    this.sessionId = reply.body.sessionId
    this.tokenCertain = true
    this.ledger.sessions.add(this.sessionId)
    this.ledger.count('login')
  }

  /** Rotates; a token whose rotation answer was lost may have been rotated (then 401, and a new login). */
  async rotate(): Promise<void> {
    const certain = this.tokenCertain
    this.tokenCertain = false
    const reply = await this.call('POST', '/api/auth/refresh')
    if (reply.status === 200) {
      this.access = cookieOf(reply, 'access_token') ?? this.access
      this.refresh = cookieOf(reply, 'refresh_token') ?? this.refresh
      this.tokenCertain = true
      this.ledger.count('refresh')
      return
    }
    // A token the service last gave, acknowledged, must still work after any number of restarts.
    this.expect(
      reply,
      `refresh of ${certain ? 'an acknowledged' : 'a doubtful'} token`,
      certain ? [200] : [401],
    )
    await this.login()
  }

  async logout(): Promise<void> {
    this.tokenCertain = false
    const reply = await this.call('POST', '/api/auth/logout')
    this.expect(reply, 'logout', [204])
    this.ledger.count('logout')
    await this.login()
  }

  mine(status: string): string[] {
    return [...this.ledger.requests]
      .filter(([, r]) => r.creator === this.index && r.status === status && !r.doubtful)
      .map(([id]) => id)
  }

  any(statuses: string[]): string[] {
    return [...this.ledger.requests]
      .filter(([, r]) => statuses.includes(r.status) && !r.doubtful)
      .map(([id]) => id)
  }

  async create(): Promise<void> {
    const reply = await this.call('POST', '/api/purchase-requests', {
      title: `Killed ${randomBytes(3).toString('hex')}`,
    })
    if (!this.expect(reply, 'create', [201])) return
    this.ledger.requests.set(reply.body.id, { status: 'DRAFT', doubtful: false, creator: this.index })
    this.ledger.count('create')
  }

  async move(action: 'submit' | 'approve'): Promise<void> {
    const to = action === 'submit' ? 'SUBMITTED' : 'APPROVED'
    const id = this.pick(action === 'submit' ? this.mine('DRAFT') : this.any(['SUBMITTED']))
    if (!id) return
    const entry = this.ledger.requests.get(id) as { status: string; doubtful: boolean }
    // In doubt until answered (no other client picks it meanwhile); a cut-off move stays in doubt
    // until the check after the restart reads what happened.
    entry.doubtful = true
    const reply = await this.call('POST', `/api/purchase-requests/${id}/${action}`)
    if (!this.expect(reply, action, [200])) return
    entry.status = to
    entry.doubtful = false
    this.ledger.count(action)
  }

  /**
   * Uploads of all clients run at once: confirms delete staging objects next to objects being
   * written, which the embedded store once lost (embedded-store-concurrent-uploads.test.ts).
   */
  async upload(): Promise<void> {
    const resourceId = this.pick(this.any(['DRAFT', 'SUBMITTED', 'APPROVED']))
    if (!resourceId) return
    const initiated = await this.call('POST', '/api/storage/files', {
      resourceType: 'purchase_request',
      resourceId,
      fileName: 'quote.pdf',
      contentType: 'application/pdf',
    })
    if (!this.expect(initiated, 'initiate', [201])) return
    const { fileId, uploadUrl, uploadHeaders } = initiated.body
    const bytes = randomBytes(64 + Math.floor(this.random() * 4096))
    // The store is this test's, not the service's: the PUT is never cut off by the kill.
    const put = await fetch(uploadUrl, { method: 'PUT', headers: uploadHeaders, body: bytes })
    if (put.status !== 200) {
      this.ledger.unexpected.push(`PUT to the store: ${put.status}`)
      return
    }
    this.ledger.toConfirm.add(fileId)
    await this.confirm(fileId, bytes.length)
  }

  async confirm(fileId: string, size?: number): Promise<void> {
    const reply = await this.call('POST', `/api/storage/files/${fileId}/confirm`)
    if (!this.expect(reply, 'confirm', [200])) return
    this.ledger.toConfirm.delete(fileId)
    if (reply.body.status !== 'CONFIRMED' || (size !== undefined && reply.body.sizeBytes !== size)) {
      this.ledger.unexpected.push(`confirm answered ${JSON.stringify(reply.body)} for ${size} bytes`)
    }
    this.ledger.confirmed.set(fileId, reply.body.sizeBytes)
    this.ledger.count('confirm')
  }

  async report(): Promise<void> {
    const id = this.pick(this.any(['SUBMITTED', 'APPROVED']))
    if (!id) return
    const reply = await this.call('POST', `/api/purchase-requests/${id}/report`)
    if (!this.expect(reply, 'report', [201])) return
    this.ledger.confirmed.set(reply.body.id, reply.body.sizeBytes)
    this.ledger.count('report')
  }

  async invite(): Promise<void> {
    const email = `invitee-${randomBytes(4).toString('hex')}@example.test`
    const reply = await this.call('POST', '/api/users', { email, organizationId: this.organizationId })
    if (!this.expect(reply, 'invite', [202])) return
    this.ledger.invited.set(email, reply.body.userId)
    this.ledger.count('invite')
  }

  async adminReset(): Promise<void> {
    const userId = this.pick([...this.ledger.invited.values()])
    if (!userId) return
    const sentAt = new Date()
    const reply = await this.call('POST', `/api/users/${userId}/reset-password`)
    if (!this.expect(reply, 'admin reset', [202])) return
    this.ledger.adminResets.push({ userId, sentAt })
    this.ledger.count('admin reset')
  }

  async selfReset(): Promise<void> {
    // Answered at once; the lookup and the email happen after the answer (no timing oracle), so a
    // kill right after it may lose the request: the user asks again. Nothing is asserted from the 202.
    const reply = await this.call('POST', '/api/auth/password-reset/request', { email: this.email }, false)
    this.expect(reply, 'self-service reset', [202])
    this.ledger.count('self-service reset')
  }

  async read(): Promise<void> {
    const reply = await this.call('GET', '/api/purchase-requests?limit=20')
    this.expect(reply, 'list', [200])
  }

  async step(): Promise<void> {
    const roll = this.random()
    if (roll < 0.18) await this.create()
    else if (roll < 0.3) await this.move('submit')
    else if (roll < 0.4) await this.move('approve')
    else if (roll < 0.52) await this.upload()
    else if (roll < 0.55) await this.report()
    else if (roll < 0.68) await this.rotate()
    else if (roll < 0.73) await this.login()
    else if (roll < 0.75) await this.logout()
    else if (roll < 0.83) await this.invite()
    else if (roll < 0.87) await this.adminReset()
    else if (roll < 0.91) await this.selfReset()
    else await this.read()
  }
}

/** The rows an invariant query returns; an empty list is a pass. */
async function violations(db: TestDatabase['handle']['db'], query: ReturnType<typeof sql>) {
  return (await query.execute(db)).rows
}

describe.skipIf(!usingPostgres())('kill -9 of the service at random points of a mixed workload', () => {
  const seed = Number(process.env.KILL_RESTART_SEED ?? randomInt(2 ** 31))
  let database: TestDatabase
  let s3: TestS3
  let store: S3ObjectStore
  let smtp: SmtpSink
  let dataDir: string
  let env: Record<string, string>
  let service: ServiceProcess | undefined
  const ledger = new Ledger()
  const clients: Client[] = []

  beforeAll(async () => {
    process.stdout.write(`kill -9 seed: ${seed} (replay with KILL_RESTART_SEED=${seed})\n`)
    ;[database, s3, smtp, dataDir] = await Promise.all([
      createTestDatabase({ poolSize: 3 }),
      startTestS3(),
      SmtpSink.start(),
      mkdtemp(path.join(tmpdir(), 'platform-kill-')),
    ])
    store = s3.store()
    const secret = testSecret()
    const config: ConfigSource = {
      ...FAST_LOGIN_CONFIG,
      'platform.profile': 'test',
      'platform.auth.jwt.secret': secret,
      'platform.datasource.url': database.url,
      'platform.datasource.pool-size': '5',
      'platform.data-dir': dataDir,
      'platform.auth.rate-limit.login-per-minute': '100000',
      'platform.auth.rate-limit.service-token-per-minute': '100000',
      'platform.auth.rate-limit.reset-per-minute': '100000',
      'platform.auth.rate-limit.invite-per-minute': '100000',
      'platform.auth.rate-limit.reset-per-hour': '100000',
      'platform.auth.rate-limit.refresh-per-minute': '100000',
      'platform.mail.smtp.url': smtp.url,
      'platform.web.frontend-url': FRONTEND,
      ...s3.config,
    }
    env = { ...envOf(config), LOG_LEVEL: 'warn' }
    // The organization and its admins, written the way the CLI writes them.
    const seeding = await createTestApp({ config, database })
    try {
      const organizationId = await newOrganization(seeding.app)
      for (let i = 0; i < CLIENTS; i++) {
        const user = await newUser(seeding.app, { organizationId, role: 'admin' })
        clients.push(new Client(i, user.email, organizationId, ledger, seed + 7919 * (i + 1)))
      }
    } finally {
      await seeding.close()
    }
  }, 60_000)

  afterAll(async () => {
    await service?.kill()
    await store?.close()
    await Promise.all([s3?.close(), smtp?.close()])
    await database?.dispose()
    if (dataDir) await rm(dataDir, { recursive: true, force: true })
  })

  const db = () => database.handle.db

  /**
   * Undelivered rows of the mail outbox, but for those a killed worker still holds: it claimed them
   * (lease until claim + 5 minutes) before `restartedAt`, so their lease ends before `restartedAt + 5 min`.
   */
  const undelivered = async (restartedAt: Date) =>
    Number(
      (
        await sql<{ n: string }>`
          select count(*) as n from mail_outbox
          where sent_at is null and failed_at is null
            and not (lease_until is not null and lease_until >= now()
                     and lease_until < ${new Date(restartedAt.getTime() + MAIL_LEASE_MS)})`.execute(db())
      ).rows[0]?.n,
    )

  const until = (what: string, condition: () => Promise<boolean>, withinMs: number) =>
    pollUntil(what, condition, withinMs, 50)

  /** Every invariant, by SQL and against the store, then what the service acknowledged. */
  async function checkInvariants(round: number, restartedAt: Date) {
    const at = `after restart ${round}`
    // Sessions: one chain of refresh tokens each.
    expect(
      await violations(
        db(),
        sql`select s.id from sessions s where not exists (select 1 from refresh_tokens t where t.session_id = s.id)`,
      ),
      `${at}: sessions without a refresh token`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select session_id, count(*) filter (where rotated_at is null) as unrotated, count(*) as tokens
            from refresh_tokens group by session_id having count(*) filter (where rotated_at is null) <> 1`,
      ),
      `${at}: sessions whose chain has not exactly one unrotated token`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select session_id, id, rotated_at, next_created from (
              select session_id, id, rotated_at,
                lead(created_at) over (partition by session_id order by created_at, rotated_at nulls last, id) as next_created
              from refresh_tokens) chain
            where rotated_at is not null and next_created is distinct from rotated_at`,
      ),
      `${at}: rotated tokens without the successor their rotation created`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select s.id, t.id as token from sessions s join refresh_tokens t on t.session_id = s.id
            where (s.revoked_at is not null and t.revoked_at is null)
               or (s.revoked_at is null and t.rotated_at is null and t.revoked_at is not null)`,
      ),
      `${at}: revoked sessions with a usable token, or live sessions whose current token is revoked`,
    ).toEqual([])

    // Purchase requests: ownership tuple, its outbox record, audit rows matching the status.
    expect(
      await violations(
        db(),
        sql`select p.id from purchase_requests p where not exists (
              select 1 from authz_tuples t where t.object_type = 'purchase_request' and t.object_id = p.id
                and t.relation = 'owner_organization' and t.subject_type = 'organization'
                and t.subject_id = p.organization_id::text and t.subject_relation = '')
            or (select count(*) from authz_outbox o where o.object = 'purchase_request:' || p.id
                and o.relation = 'owner_organization' and o.operation = 'write') <> 1`,
      ),
      `${at}: purchase requests without their ownership tuple`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select p.id, p.status, e.n, e.submits, e.approvals from purchase_requests p
            left join (select purchase_request_id, count(*) as n,
                count(*) filter (where action = 'submit' and from_status = 'DRAFT' and to_status = 'SUBMITTED') as submits,
                count(*) filter (where action = 'approve' and from_status = 'SUBMITTED' and to_status = 'APPROVED') as approvals
              from purchase_request_events group by purchase_request_id) e on e.purchase_request_id = p.id
            where coalesce(e.n, 0) <> coalesce(e.submits, 0) + coalesce(e.approvals, 0)
               or coalesce(e.submits, 0) <> (case when p.status = 'DRAFT' then 0 else 1 end)
               or coalesce(e.approvals, 0) <> (case when p.status = 'APPROVED' then 1 else 0 end)`,
      ),
      `${at}: purchase requests whose audit rows do not match their status`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select coalesce(e.recipient, m.recipient) as recipient, coalesce(e.at, m.at) as at, e.n as approvals, m.n as mails
            from (select a.email as recipient, e.occurred_at as at, count(*) as n from purchase_request_events e
                  join purchase_requests p on p.id = e.purchase_request_id join accounts a on a.id::text = p.created_by
                  where e.action = 'approve' group by 1, 2) e
            full join (select recipient, created_at as at, count(*) as n from mail_outbox
                  where template = 'purchase_request_approved' group by 1, 2) m
              on m.recipient = e.recipient and m.at = e.at
            where e.n is distinct from m.n`,
      ),
      `${at}: approvals and approval emails that do not pair up (one email per approval, in its transaction)`,
    ).toEqual([])

    // Accounts and links: role tuples, one email per one-time token, no email without its token.
    expect(
      await violations(
        db(),
        sql`select a.id from accounts a where a.deactivated_at is null and not exists (
              select 1 from authz_tuples t where t.object_type = 'organization' and t.object_id = a.organization_id::text
                and t.relation = a.role and t.subject_type = 'user' and t.subject_id = a.id::text)`,
      ),
      `${at}: accounts without their role tuple`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select coalesce(o.recipient, m.recipient) as recipient, coalesce(o.template, m.template) as template,
              coalesce(o.at, m.at) as at, o.n as tokens, m.n as mails
            from (select a.email as recipient, o.created_at as at, count(*) as n,
                    case o.purpose when 'INVITATION' then 'invitation' else 'password_reset' end as template
                  from one_time_tokens o join accounts a on a.id = o.account_id group by 1, 2, 4) o
            full join (select recipient, created_at as at, template, count(*) as n from mail_outbox
                  where template in ('invitation', 'password_reset') group by 1, 2, 3) m
              on m.recipient = o.recipient and m.at = o.at and m.template = o.template
            where o.n is distinct from m.n`,
      ),
      `${at}: one-time tokens and link emails that do not pair up (one email per token, in its transaction)`,
    ).toEqual([])
    expect(
      await violations(db(), sql`select id, last_error from mail_outbox where failed_at is not null`),
      `${at}: dead-lettered mail`,
    ).toEqual([])
    expect(
      await violations(
        db(),
        sql`select id from authz_outbox where processed_at is null or failed_at is not null`,
      ),
      `${at}: authorization changes not applied`,
    ).toEqual([])

    // Mail: the restarted worker delivers every row it may claim; a row the killed worker held
    // stays held only until its lease runs out (never for good).
    await until(`the mail outbox drained ${at}`, async () => (await undelivered(restartedAt)) === 0, 15_000)
    expect(
      await violations(
        db(),
        sql`select id, lease_until from mail_outbox
            where sent_at is null and lease_until > now() + make_interval(secs => ${MAIL_LEASE_MS / 1000 + 5})`,
      ),
      `${at}: mail held for longer than a lease`,
    ).toEqual([])

    // Files: every CONFIRMED file is in the store with its recorded size.
    const files = await db()
      .selectFrom('files')
      .select(['id', 'object_key', 'size_bytes', 'status', 'confirmed_at'])
      .where('status', '=', 'CONFIRMED')
      .execute()
    const missing: string[] = []
    for (const file of files) {
      const object = await store.head(file.object_key)
      if (!object || object.size !== Number(file.size_bytes) || !file.confirmed_at) missing.push(file.id)
    }
    expect(missing, `${at}: CONFIRMED files missing from the store or of another size`).toEqual([])

    // What was acknowledged before the kill is there.
    const requests = new Map(
      (await db().selectFrom('purchase_requests').select(['id', 'status']).execute()).map((r) => [
        r.id,
        r.status,
      ]),
    )
    const order = ['DRAFT', 'SUBMITTED', 'APPROVED']
    for (const [id, known] of ledger.requests) {
      const stored = requests.get(id)
      expect(stored, `${at}: acknowledged purchase request ${id}`).toBeDefined()
      const ahead = order.indexOf(stored as string) - order.indexOf(known.status)
      // A move whose answer was lost may or may not have happened; an acknowledged one has.
      expect(
        known.doubtful ? ahead === 0 || ahead === 1 : ahead === 0,
        `${at}: ${id} is ${stored}, acknowledged ${known.status}`,
      ).toBe(true)
      known.status = stored as string
      known.doubtful = false
    }
    const confirmed = new Set(files.map((f) => f.id))
    for (const [id] of ledger.confirmed)
      expect(confirmed.has(id), `${at}: acknowledged confirmation of ${id}`).toBe(true)
    const invited = await db()
      .selectFrom('accounts')
      .innerJoin('one_time_tokens', 'one_time_tokens.account_id', 'accounts.id')
      .select(['accounts.email', 'accounts.id'])
      .where('one_time_tokens.purpose', '=', 'INVITATION')
      .execute()
    const invitedEmails = new Map(invited.map((r) => [r.email, r.id]))
    for (const [email, userId] of ledger.invited)
      expect(invitedEmails.get(email), `${at}: invitation of ${email}`).toBe(userId)
    for (const reset of ledger.adminResets) {
      const link = await db()
        .selectFrom('one_time_tokens')
        .select('id')
        .where('account_id', '=', reset.userId)
        .where('created_at', '>=', new Date(reset.sentAt.getTime() - 1_000))
        .executeTakeFirst()
      expect(link, `${at}: acknowledged admin reset of ${reset.userId}`).toBeDefined()
    }
    const sessions = new Set((await db().selectFrom('sessions').select('id').execute()).map((s) => s.id))
    for (const id of ledger.sessions) expect(sessions.has(id), `${at}: acknowledged login ${id}`).toBe(true)
    for (const client of clients.filter((c) => c.tokenCertain)) {
      const current = await db()
        .selectFrom('refresh_tokens')
        .select(['rotated_at', 'revoked_at'])
        .where('token_hash', '=', sha256(client.refresh))
        .executeTakeFirst()
      expect(current, `${at}: the refresh token client ${client.index} was last given`).toEqual({
        rotated_at: null,
        revoked_at: null,
      })
    }
  }

  it(`keeps every invariant over ${ROUNDS} kills at random moments, and serves normally after the last restart`, async () => {
    const random = generator(seed)
    const started = Date.now()
    let kills = 0
    let interrupted = 0
    let restartedAt = new Date()
    service = await startService({ env })
    for (const client of clients) {
      client.base = service.base
      await client.login()
    }
    for (let round = 1; round <= ROUNDS; round++) {
      // Run the workload, then kill the service between 100 and 1,100 ms into it.
      const killAfter = 100 + Math.floor(random() * 1_000)
      let dead = false
      const runs = clients.map(async (client) => {
        try {
          while (!dead) await client.step()
        } catch (error) {
          if (!(error instanceof Interrupted)) throw error
          interrupted += 1
          // The call in flight is in doubt (a move stays marked so); a session call, the token too.
          if (/\/api\/auth\/(refresh|login|logout)/.test(error.message)) client.tokenCertain = false
        }
      })
      await new Promise((resolve) => setTimeout(resolve, killAfter))
      dead = true
      const killed = await service.kill()
      kills += 1
      expect(killed.signal).toBe('SIGKILL')
      await Promise.all(runs)
      restartedAt = new Date()
      service = await startService({ env, port: service.port })
      await checkInvariants(round, restartedAt)
      expect(ledger.unexpected, `answers before kill ${round}`).toEqual([])
      for (const client of clients) client.base = service.base
      // Confirmations cut off by the kill: the bytes are in the store, and confirm is idempotent.
      for (const fileId of [...ledger.toConfirm]) await (clients[0] as Client).confirm(fileId)
    }

    // After the last restart the service answers normally: every client can go on.
    for (const client of clients) {
      await client.rotate()
      await client.create()
      const drafts = client.mine('DRAFT')
      const id = drafts[drafts.length - 1] as string
      expect((await client.call('POST', `/api/purchase-requests/${id}/submit`)).status).toBe(200)
      expect((await client.call('POST', `/api/purchase-requests/${id}/approve`)).status).toBe(200)
      ledger.requests.set(id, { status: 'APPROVED', doubtful: false, creator: client.index })
      await client.upload()
    }
    expect(ledger.unexpected, 'answers after the last restart').toEqual([])
    expect(ledger.toConfirm.size).toBe(0)
    const ready = await fetch(`${service.base}/health/ready`)
    expect(ready.status).toBe(200)

    // The leases the killed workers held run out (5 minutes, moved forward here rather than waited
    // for): the live worker then delivers those rows too, with the Message-ID of the first attempt.
    const stale = await sql`update mail_outbox set lease_until = now() - interval '1 second'
      where sent_at is null and lease_until is not null and lease_until < ${new Date(restartedAt.getTime() + MAIL_LEASE_MS)}`.execute(
      db(),
    )
    await until(
      'every queued email delivered',
      async () =>
        Number(
          (
            await sql<{ n: string }>`select count(*) as n from mail_outbox where sent_at is null`.execute(
              db(),
            )
          ).rows[0]?.n,
        ) === 0,
      20_000,
    )
    await checkInvariants(ROUNDS + 1, restartedAt)
    const rows = await db().selectFrom('mail_outbox').select(['id', 'message_id']).execute()
    const copies = new Map<string, number>()
    for (const id of smtp.messageIds()) copies.set(id, (copies.get(id) ?? 0) + 1)
    const known = new Set(rows.map((r) => r.message_id))
    expect(
      [...copies.keys()].filter((id) => !known.has(id)),
      'emails no outbox row queued',
    ).toEqual([])
    // Sent at least once, and at most once more when a kill fell between the SMTP answer and the record.
    const delivered = rows.map((r) => ({ id: r.id, copies: copies.get(r.message_id) ?? 0 }))
    const counts = delivered.map((d) => d.copies)
    expect(
      delivered.filter((d) => d.copies < 1 || d.copies > 2),
      'outbox rows not delivered once (or once more after a kill)',
    ).toEqual([])

    const stopped = await service.stop()
    service = undefined
    expect(stopped.code).toBe(0)
    const figures = {
      seed,
      kills,
      interruptedClients: interrupted,
      seconds: Math.round((Date.now() - started) / 1000),
      operations: Object.fromEntries(ledger.counts),
      purchaseRequests: ledger.requests.size,
      confirmedFiles: ledger.confirmed.size,
      mails: rows.length,
      mailsSentTwice: counts.filter((n) => n === 2).length,
      staleLeasesExpired: Number(stale.numAffectedRows ?? 0),
    }
    process.stdout.write(`kill -9 figures: ${JSON.stringify(figures)}\n`)
    expect(kills).toBe(ROUNDS)
  }, 180_000)
})
