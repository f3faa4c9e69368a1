import pino from 'pino'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { inTransaction } from '../src/db/database.ts'
import { approvalTemplate } from '../src/features/purchase-requests/approval.ts'
import { enqueueMail, MAIL_MAX_ATTEMPTS, type MailMessage, MailOutboxWorker } from '../src/mail/outbox.ts'
import { type MailTemplateName, MailTemplates } from '../src/mail/templates.ts'
import { type MailTransport, SmtpTransport } from '../src/mail/transports.ts'
import { retryDelayMs } from '../src/outbox/engine.ts'
import { createTestApp, LogCapture } from './helpers/app.ts'
import { TestClock } from './helpers/clock.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { closedPort, TestSmtpServer } from './helpers/smtp.ts'

// Email never blocks or rolls back a committed change, and is sent once: the outbox
// row commits with the change, the worker delivers it with retries, and workers on one database
// never deliver the same row twice.

let database: TestDatabase
let smtp: TestSmtpServer
let up: SmtpTransport
let clock: TestClock
let logs: LogCapture

const db = () => database.handle.db
const RESET_LINK = 'https://app.test/reset-password?token=s3cr3t-token-value'

beforeAll(async () => {
  database = await createTestDatabase()
  smtp = await TestSmtpServer.start()
  up = new SmtpTransport(smtp.url)
})

afterAll(async () => {
  await up?.close()
  await smtp?.close()
  await database?.dispose()
})

beforeEach(async () => {
  await db().deleteFrom('mail_outbox').execute()
  smtp.clear()
  clock = new TestClock()
  logs = new LogCapture()
})

function worker(
  transport: MailTransport = up,
  options: { batchSize?: number; templates?: MailTemplates } = {},
) {
  return new MailOutboxWorker({
    db: db(),
    transport,
    clock,
    from: 'Platform <no-reply@platform.test>',
    log: pino(logs),
    // The retry jitter pinned to its upper end, so the wait each failure sets is known exactly.
    random: () => 0,
    ...options,
  })
}

function enqueue<K extends MailTemplateName>(message: MailMessage<K>) {
  return inTransaction(db(), (trx) => enqueueMail(trx, message, clock.now()))
}

const resetMail = (to = 'alice@example.com'): MailMessage<'password_reset'> => ({
  template: 'password_reset',
  to,
  data: { link: RESET_LINK },
})

const row = (id: string) =>
  db().selectFrom('mail_outbox').selectAll().where('id', '=', id).executeTakeFirstOrThrow()

describe('mail outbox', () => {
  it('delivers a message enqueued in a committed transaction once', async () => {
    const { id, messageId } = await enqueue(resetMail())
    const w = worker()

    expect(await w.runOnce()).toBe(1)
    expect(smtp.received).toHaveLength(1)
    const parsed = await smtp.received[0]?.parsed()
    expect(smtp.received[0]?.recipients).toEqual(['alice@example.com'])
    expect(parsed?.subject).toBe('Reset your password')
    expect(parsed?.text).toContain(RESET_LINK)
    expect(parsed?.messageId).toBe(`<${messageId}@platform.test>`)
    expect(await row(id)).toMatchObject({
      attempts: 1,
      sent_at: clock.now(),
      lease_until: null,
      failed_at: null,
    })

    clock.advance(24 * 3600 * 1000)
    expect(await w.runOnce()).toBe(0)
    expect(smtp.received).toHaveLength(1)
  })

  it('never sends a message enqueued in a transaction that rolls back', async () => {
    await expect(
      inTransaction(db(), async (trx) => {
        await enqueueMail(trx, resetMail(), clock.now())
        throw new Error('the change failed')
      }),
    ).rejects.toThrow('the change failed')

    expect(await worker().runOnce()).toBe(0)
    expect(smtp.received).toHaveLength(0)
    expect(await db().selectFrom('mail_outbox').select('id').execute()).toEqual([])
  })

  it('is woken by the insert when a message is queued, without waiting for a poll', async () => {
    // A poll an hour apart: only the NOTIFY of the outbox's insert trigger (migration 0018) can
    // bring this message out in time.
    const listening = new MailOutboxWorker({
      db: db(),
      transport: up,
      clock,
      from: 'Platform <no-reply@platform.test>',
      log: pino(logs),
      listen: database.handle.listen,
      pollIntervalMs: 3_600_000,
    })
    await listening.start()
    try {
      const { messageId } = await enqueue(resetMail())
      await smtp.waitForCount(1)
      expect(smtp.received).toHaveLength(1)
      expect(smtp.received[0]?.raw.toString()).toContain(`<${messageId}@platform.test>`)
    } finally {
      await listening.stop()
    }
  })

  it('delivers each of 20 messages exactly once with two workers running concurrently', async () => {
    const recipients = Array.from({ length: 20 }, (_, i) => `user${i}@example.com`)
    for (const to of recipients) await enqueue(resetMail(to))
    const a = worker(up, { batchSize: 3 })
    const b = worker(up, { batchSize: 3 })
    // The server answers only once both workers are in the middle of a send: each holds rows that
    // the other skipped, and neither holds a transaction (on PGlite, that would block the other).
    smtp.holdUntilConcurrent(2)

    const [fromA, fromB] = await Promise.all([a.runOnce(), b.runOnce()])
    expect(fromA).toBeGreaterThan(0)
    expect(fromB).toBeGreaterThan(0)
    expect(fromA + fromB).toBe(20)
    expect(await a.runOnce()).toBe(0)
    expect(await b.runOnce()).toBe(0)

    expect(smtp.received).toHaveLength(20)
    expect(smtp.received.flatMap((m) => m.recipients).sort()).toEqual(recipients.toSorted())
    const ids = await Promise.all(smtp.received.map(async (m) => (await m.parsed()).messageId))
    expect(new Set(ids).size).toBe(20)
    const rows = await db().selectFrom('mail_outbox').select(['attempts', 'sent_at']).execute()
    expect(rows.every((r) => r.attempts === 1 && r.sent_at !== null)).toBe(true)
  })

  it('sends the messages of a batch at once, so one slow send does not hold up the others', async () => {
    // A transport that accepts a message only once three are being sent together: a worker that
    // sends one message at a time never gets there, and each of its sends fails after a second.
    const inFlight = { count: 0, all: Promise.withResolvers<void>() }
    const together: MailTransport = {
      async send() {
        inFlight.count += 1
        if (inFlight.count === 3) inFlight.all.resolve()
        const timeout = new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('sent alone')), 1_000).unref(),
        )
        await Promise.race([inFlight.all.promise, timeout])
      },
      close: async () => {},
    }
    for (const to of ['a@example.com', 'b@example.com', 'c@example.com']) await enqueue(resetMail(to))
    expect(await worker(together).runOnce()).toBe(3)
    const sent = await db().selectFrom('mail_outbox').select('sent_at').execute()
    expect(sent.every((r) => r.sent_at !== null)).toBe(true)
  })

  it('backs off while SMTP is down, then delivers once when it is back', async () => {
    const down = new SmtpTransport(`smtp://127.0.0.1:${await closedPort()}`)
    const { id } = await enqueue(resetMail())
    const failing = worker(down)
    try {
      const start = clock.now().getTime()
      expect(await failing.runOnce()).toBe(1)
      let stored = await row(id)
      expect(stored).toMatchObject({ attempts: 1, sent_at: null, failed_at: null, lease_until: null })
      expect(stored.next_attempt_at).toEqual(new Date(start + retryDelayMs(1, () => 0)))
      expect(stored.last_error).toMatch(/ECONNREFUSED|ESOCKET|ECONNECTION/)

      // Not due yet: nothing is attempted.
      expect(await failing.runOnce()).toBe(0)
      clock.advance(retryDelayMs(1, () => 0))
      expect(await failing.runOnce()).toBe(1)
      stored = await row(id)
      expect(stored.attempts).toBe(2)
      expect(stored.next_attempt_at).toEqual(new Date(clock.now().getTime() + retryDelayMs(2, () => 0)))
      expect(stored.sent_at).toBeNull()
      expect(smtp.received).toHaveLength(0)

      // Failures are logged without the body, the link's token or the recipient.
      const warnings = logs.records().filter((r) => r.msg === 'mail delivery failed; will retry')
      expect(warnings).toHaveLength(2)
      expect(logs.text()).not.toContain('s3cr3t-token-value')
      expect(logs.text()).not.toContain('alice@example.com')
    } finally {
      await failing.stop()
      await down.close()
    }

    const recovered = worker(up)
    clock.advance(retryDelayMs(2, () => 0))
    expect(await recovered.runOnce()).toBe(1)
    expect(smtp.received).toHaveLength(1)
    expect(await row(id)).toMatchObject({ attempts: 3, sent_at: clock.now(), last_error: null })
    clock.advance(24 * 3600 * 1000)
    expect(await recovered.runOnce()).toBe(0)
    expect(smtp.received).toHaveLength(1)
  })

  it('gives up after 20 failed attempts and no longer retries the message', async () => {
    const down = new SmtpTransport(`smtp://127.0.0.1:${await closedPort()}`)
    const { id } = await enqueue(resetMail())
    const failing = worker(down)
    try {
      for (let attempt = 1; attempt <= MAIL_MAX_ATTEMPTS; attempt += 1) {
        expect(await failing.runOnce()).toBe(1)
        const stored = await row(id)
        expect(stored.attempts).toBe(attempt)
        if (attempt < MAIL_MAX_ATTEMPTS) {
          expect(stored.failed_at).toBeNull()
          expect(stored.next_attempt_at).toEqual(
            new Date(clock.now().getTime() + retryDelayMs(attempt, () => 0)),
          )
          clock.advance(retryDelayMs(attempt, () => 0))
        } else {
          expect(stored.failed_at).toEqual(clock.now())
        }
      }
      clock.advance(7 * 24 * 3600 * 1000)
      expect(await failing.runOnce()).toBe(0)
      expect(await worker(up).runOnce()).toBe(0)
      expect(smtp.received).toHaveLength(0)
      expect((await row(id)).attempts).toBe(MAIL_MAX_ATTEMPTS)
      expect(logs.records().filter((r) => r.msg === 'mail delivery failed; giving up')).toHaveLength(1)
    } finally {
      await failing.stop()
      await down.close()
    }
  })

  it('waits 2 s × 2^(n−1) after the n-th failure, at most 5 minutes, less a random half (one policy for every outbox)', () => {
    const full = (n: number) => retryDelayMs(n, () => 0)
    expect([1, 2, 3, 4, 8].map(full)).toEqual([2_000, 4_000, 8_000, 16_000, 256_000])
    expect(full(9)).toBe(300_000)
    expect(full(30)).toBe(300_000)
    expect(retryDelayMs(4, () => 0.5)).toBe(12_000)
    expect(retryDelayMs(9, () => 0.999_999)).toBe(150_000)
    const drawn = Array.from({ length: 200 }, () => retryDelayMs(5))
    expect(Math.min(...drawn)).toBeGreaterThanOrEqual(16_000)
    expect(Math.max(...drawn)).toBeLessThanOrEqual(32_000)
    expect(new Set(drawn).size).toBeGreaterThan(1)
  })

  it('marks a row with an unknown template failed at once', async () => {
    const inserted = await db()
      .insertInto('mail_outbox')
      .values({
        template: 'no_such_template',
        recipient: 'alice@example.com',
        data: '{}',
        created_at: clock.now(),
        next_attempt_at: clock.now(),
      })
      .returning('id')
      .executeTakeFirstOrThrow()
    expect(await worker().runOnce()).toBe(1)
    expect(await row(inserted.id)).toMatchObject({ attempts: 1, failed_at: clock.now(), sent_at: null })
    expect(smtp.received).toHaveLength(0)
  })

  it('renders at send time: escaped HTML, and a subject resolver that reads the database', async () => {
    const organization = await db()
      .insertInto('organizations')
      .values({ name: 'Acme\r\nBcc: attacker@example.com', created_at: clock.now() })
      .returning('id')
      .executeTakeFirstOrThrow()
    const templates = new MailTemplates()
    templates.register('purchase_request_approved', approvalTemplate)
    // A resolver reads what it needs through its own dependencies (here the database).
    templates.resolveSubject('purchase_request_approved', async ({ organizationId, data }) => {
      const org = await db()
        .selectFrom('organizations')
        .select('name')
        .where('id', '=', organizationId ?? '')
        .executeTakeFirstOrThrow()
      return `${org.name}: approved ${data.title}`
    })
    await enqueue({
      template: 'purchase_request_approved',
      to: 'bob@example.com',
      data: { title: '<b>Chairs</b> & desks' },
      organizationId: organization.id,
    })
    await enqueue({
      template: 'invitation',
      to: 'carol@example.com',
      data: { link: 'https://app.test/a?token=x&y="z"', organizationName: '<script>alert(1)</script>' },
    })

    expect(await worker(up, { templates }).runOnce()).toBe(2)
    // The messages of a batch are sent at once, so they may arrive in either order.
    const to = (address: string) => smtp.received.find((m) => m.recipients.includes(address))?.parsed()
    expect(smtp.received.map((m) => m.recipients).sort()).toEqual([
      ['bob@example.com'],
      ['carol@example.com'],
    ])
    const [approval, invitation] = await Promise.all([to('bob@example.com'), to('carol@example.com')])
    expect(approval?.subject).toBe('Acme Bcc: attacker@example.com: approved <b>Chairs</b> & desks')
    expect(approval?.headers.has('bcc')).toBe(false)
    expect(approval?.html).toContain('&lt;b&gt;Chairs&lt;/b&gt; &amp; desks')
    expect(invitation?.subject).toBe('You are invited to <script>alert(1)</script>')
    expect(invitation?.html).not.toContain('<script>')
    expect(invitation?.html).toContain('&lt;script&gt;alert(1)&lt;/script&gt;')
    expect(invitation?.html).toContain('href="https://app.test/a?token=x&amp;y=&quot;z&quot;"')
  })
})

describe('mail plugin', () => {
  it('decorates app.mail with the worker and the injected transport, which delivers what enqueueMail wrote', async () => {
    const t = await createTestApp({ deps: { mailTransport: up, startMailWorker: false } })
    try {
      expect(t.app.mail.transport).toBe(up)
      const { messageId } = await inTransaction(t.app.db, (trx) =>
        enqueueMail(trx, { template: 'password_changed', to: 'dave@example.com', data: {} }, t.clock.now()),
      )
      expect(await t.app.mail.worker.runOnce()).toBe(1)
      expect(smtp.received).toHaveLength(1)
      const parsed = await smtp.received[0]?.parsed()
      expect(parsed?.subject).toBe('Your password was changed')
      expect(parsed?.from?.text).toBe(t.config.mail.from)
      expect(parsed?.messageId).toBe(`<${messageId}@localhost>`)
    } finally {
      await t.close()
    }
  })

  it('starts the worker when the app is ready, which then delivers without being driven', async () => {
    const t = await createTestApp({ database, deps: { mailTransport: up, startMailWorker: true } })
    try {
      await inTransaction(t.app.db, (trx) =>
        enqueueMail(trx, { template: 'otp_enabled', to: 'erin@example.com', data: {} }, t.clock.now()),
      )
      await smtp.waitForCount(1)
      expect(smtp.received[0]?.recipients).toEqual(['erin@example.com'])
    } finally {
      await t.close()
    }
    // Closing waited for the run in flight, so the delivery is recorded.
    const [stored] = await db().selectFrom('mail_outbox').select('sent_at').execute()
    expect(stored?.sent_at).toEqual(t.clock.now())
  })
})
