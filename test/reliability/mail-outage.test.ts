import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { SmtpTransport } from '../../src/mail/transports.ts'
import { listDeadLetters, outboxCounts } from '../../src/outbox/status.ts'
import {
  ACCOUNT_TEST_CONFIG,
  asUser,
  confirmPassword,
  linkToken,
  mailsTo,
  newUser,
  rawMailsTo,
  requestPasswordReset,
  signIn,
  uniqueEmail,
} from '../helpers/accounts.ts'
import { createTestApp, type TestApp } from '../helpers/app.ts'
import { TestSmtpServer } from '../helpers/smtp.ts'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts'

// Two mail failures, with a real SMTP server behind a TCP proxy that the test cuts.
// An outage: the SMTP server is down for minutes (of the test clock): requests that send mail still
// answer 202 at once, the outbox backs off, and delivers once the server is back; a message that
// keeps failing is dead-lettered and shows in the metrics and the outbox report the CLI prints.
// A crash between sending and recording: the service dies after the SMTP server accepted a message
// but before it recorded it as sent: the message goes out at most once more, with the same
// Message-ID and the same link.

const FIVE_MINUTES = 5 * 60_000
const LEASE_MS = 5 * 60_000

describe('the SMTP server going away under the service', () => {
  let smtp: TestSmtpServer
  let proxy: TcpProxy
  let transport: SmtpTransport
  let t: TestApp

  beforeAll(async () => {
    smtp = await TestSmtpServer.start()
    proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(smtp.url).port) })
    transport = new SmtpTransport(`smtp://127.0.0.1:${proxy.port}`)
    t = await createTestApp({ config: ACCOUNT_TEST_CONFIG, deps: { mailTransport: transport } })
  })

  afterAll(async () => {
    await t?.close()
    await transport?.close()
    await proxy?.close()
    await smtp?.close()
  })

  const outboxRowsTo = (...recipients: string[]) =>
    t.app.db
      .selectFrom('mail_outbox')
      .selectAll()
      .where('recipient', 'in', recipients)
      .orderBy('id')
      .execute()

  const deliver = async () => {
    await t.app.background.idle()
    return t.app.mail.worker.runOnce()
  }

  // Each test starts with nothing due (a password change queues its notice) and an empty mailbox.
  beforeEach(async () => {
    t.clock.advance(FIVE_MINUTES)
    await deliver()
    smtp.clear()
  })

  it('answers 202 while SMTP is down, backs off for minutes, then delivers each message once', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const member = await newUser(t.app, { organizationId: admin.organizationId })
    const session = await signIn(t.app, admin)
    const invitee = uniqueEmail('invitee')
    smtp.clear()
    await proxy.cut()
    try {
      const reset = await requestPasswordReset(t.app, member.email)
      expect(reset.statusCode).toBe(202)
      const invite = await asUser(t.app, session, {
        method: 'POST',
        url: '/api/users',
        payload: { email: invitee, organizationId: admin.organizationId, role: 'member' },
      })
      expect(invite.statusCode).toBe(202)

      // Ten minutes of attempts on the test clock: each due attempt fails and the next waits longer.
      let attempts = 0
      for (let round = 0; round < 5; round += 1) {
        expect(await deliver()).toBe(2)
        attempts += 1
        const rows = await outboxRowsTo(member.email, invitee)
        for (const row of rows) {
          expect(row).toMatchObject({ attempts, sent_at: null, failed_at: null, lease_until: null })
          expect(row.next_attempt_at.getTime()).toBeGreaterThan(t.clock.now().getTime())
          expect(row.last_error).toMatch(/ECONNREFUSED|ECONNRESET|ESOCKET|ECONNECTION|closed/i)
        }
        // Not due before its backoff: nothing is attempted.
        expect(await deliver()).toBe(0)
        t.clock.advance(FIVE_MINUTES / 2)
      }
      expect(smtp.received).toHaveLength(0)
    } finally {
      await proxy.restore()
    }

    t.clock.advance(FIVE_MINUTES)
    expect(await deliver()).toBe(2)
    expect(await deliver()).toBe(0)
    expect(await mailsTo(smtp, member.email)).toHaveLength(1)
    expect(await mailsTo(smtp, invitee)).toHaveLength(1)
    for (const row of await outboxRowsTo(member.email, invitee)) {
      expect(row).toMatchObject({ attempts: 6, sent_at: t.clock.now(), failed_at: null, last_error: null })
    }
    // The link that finally arrived works.
    const [mail] = await mailsTo(smtp, member.email)
    const confirmed = await confirmPassword(
      t.app,
      linkToken(mail, '/reset-password'),
      'a brand new passphrase 42',
    )
    expect(confirmed.statusCode).toBe(200)
  })

  it('dead-letters a message that keeps failing, visible in /metrics and in the outbox report', async () => {
    const user = await newUser(t.app)
    const before = await outboxCounts(t.app.db)
    const gauge = async (state: string) => {
      const body = (await t.app.inject({ method: 'GET', url: '/metrics' })).body
      const line = body.split('\n').find((l) => l.startsWith(`outbox_messages{kind="mail",state="${state}"}`))
      return Number(line?.split(' ').pop())
    }
    const deadBefore = await gauge('dead_letter')
    await proxy.cut()
    try {
      const reset = await requestPasswordReset(t.app, user.email)
      expect(reset.statusCode).toBe(202)
      for (let attempt = 1; attempt <= 20; attempt += 1) {
        expect(await deliver()).toBe(1)
        t.clock.advance(FIVE_MINUTES)
      }
      expect(await deliver()).toBe(0)
    } finally {
      await proxy.restore()
    }
    const [row] = await outboxRowsTo(user.email)
    // Given up: no link or address data kept at rest, and never retried.
    expect(row).toMatchObject({ attempts: 20, sent_at: null, failed_at: expect.any(Date), data: {} })
    t.clock.advance(24 * 3_600_000)
    expect(await deliver()).toBe(0)
    expect(await mailsTo(smtp, user.email)).toHaveLength(0)

    expect(await gauge('dead_letter')).toBe(deadBefore + 1)
    const after = await outboxCounts(t.app.db)
    const mailDead = (counts: typeof before) => counts.find((c) => c.kind === 'mail')?.deadLetters
    expect(mailDead(after)).toBe((mailDead(before) ?? 0) + 1)
    expect(await listDeadLetters(t.app.db, 5)).toContainEqual(
      expect.objectContaining({ kind: 'mail', id: row?.id, what: 'password_reset', attempts: 20 }),
    )
    expect(t.logs.text()).not.toContain(user.email)
  })

  it('a service that dies after SMTP accepted a message but before recording it sends it at most once more, with the same Message-ID and link', async () => {
    const user = await newUser(t.app)
    // The first instance's transport hands the message to the SMTP server, which accepts it, and
    // then the instance never gets further: it is dead before it can record "sent".
    let dead!: () => void
    const afterlife = new Promise<void>((resolve) => {
      dead = resolve
    })
    const accepted = new SmtpTransport(smtp.url)
    const dying = await createTestApp({
      database: t.database,
      clock: t.clock,
      config: { ...ACCOUNT_TEST_CONFIG, 'platform.auth.jwt.secret': t.config.auth.jwt.secret },
      deps: {
        mailTransport: {
          send: async (message) => {
            await accepted.send(message)
            await afterlife
            throw new Error('the process is gone')
          },
          close: () => accepted.close(),
        },
      },
    })
    smtp.clear()
    try {
      const reset = await requestPasswordReset(dying.app, user.email)
      expect(reset.statusCode).toBe(202)
      await dying.app.background.idle()
      const run = dying.app.mail.worker.runOnce()
      await smtp.waitForCount(1)

      // The restarted service (the other instance here) leaves the row alone while the dead
      // worker's lease lasts, then sends it once more.
      expect(await deliver()).toBe(0)
      t.clock.advance(LEASE_MS + 1_000)
      expect(await deliver()).toBe(1)
      t.clock.advance(FIVE_MINUTES)
      expect(await deliver()).toBe(0)

      const raw = rawMailsTo(smtp, user.email)
      expect(raw).toHaveLength(2)
      const messageIds = raw.map((text) => /^Message-ID: (.+)$/im.exec(text)?.[1]?.trim())
      expect(messageIds[0]).toMatch(/^<.+@.+>$/)
      expect(messageIds[1]).toBe(messageIds[0])
      const tokens = (await mailsTo(smtp, user.email)).map((mail) => linkToken(mail, '/reset-password'))
      expect(tokens[1]).toBe(tokens[0])
      // One request, one valid token: the link works once.
      const outstanding = await t.app.db
        .selectFrom('one_time_tokens')
        .select('id')
        .where('account_id', '=', user.id)
        .where('used_at', 'is', null)
        .execute()
      expect(outstanding).toHaveLength(1)
      expect((await confirmPassword(t.app, tokens[0] as string, 'another new passphrase 7')).statusCode).toBe(
        200,
      )
      expect((await confirmPassword(t.app, tokens[1] as string, 'yet another passphrase 8')).statusCode).toBe(
        400,
      )

      // The dead worker's late "sent" changes nothing: the row is recorded once, by the live one.
      dead()
      await run.catch(() => 0)
      const [row] = await outboxRowsTo(user.email)
      expect(row).toMatchObject({ attempts: 2, sent_at: expect.any(Date) })
      expect(smtp.received).toHaveLength(2)
    } finally {
      dead()
      await dying.close()
    }
  })
})
