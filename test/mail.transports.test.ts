import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { type AddressObject, type ParsedMail, simpleParser } from 'mailparser'
import pino from 'pino'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ConfigError } from '../src/config.ts'
import {
  createMailTransport,
  FileSinkTransport,
  type MailTransport,
  type OutgoingMail,
  SmtpTransport,
} from '../src/mail/transports.ts'
import { LogCapture, testConfig } from './helpers/app.ts'
import { TestClock } from './helpers/clock.ts'
import { TestSmtpServer } from './helpers/smtp.ts'

// One contract, two adapters: what the SMTP transport delivers to a real SMTP server
// and what the embedded sink writes to disk parse to the same message.

interface Delivered {
  parsed: ParsedMail
  /** Who receives it: the SMTP envelope, or every address header of a stored file. */
  recipients: string[]
}

interface Harness {
  transport: MailTransport
  delivered(): Promise<Delivered[]>
  logs: LogCapture
  close(): Promise<void>
}

const addresses = (field: AddressObject | AddressObject[] | undefined): string[] =>
  (Array.isArray(field) ? field : field ? [field] : []).flatMap((a) => a.value.map((v) => v.address ?? ''))

const harnesses: Record<string, () => Promise<Harness>> = {
  smtp: async () => {
    const server = await TestSmtpServer.start()
    const transport = new SmtpTransport(server.url)
    return {
      transport,
      logs: new LogCapture(),
      delivered: () =>
        Promise.all(
          server.received.map(async (m) => ({ parsed: await m.parsed(), recipients: m.recipients })),
        ),
      close: async () => {
        await transport.close()
        await server.close()
      },
    }
  },
  'file sink': async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-mail-'))
    const directory = path.join(dataDir, 'mail')
    const logs = new LogCapture()
    const transport = new FileSinkTransport({ directory, log: pino(logs), clock: new TestClock() })
    return {
      transport,
      logs,
      delivered: async () => {
        const files = (await readdir(directory)).filter((f) => f.endsWith('.eml')).sort()
        return Promise.all(
          files.map(async (file) => {
            const parsed = await simpleParser(await readFile(path.join(directory, file)))
            return { parsed, recipients: [parsed.to, parsed.cc, parsed.bcc].flatMap(addresses) }
          }),
        )
      },
      close: async () => {
        await transport.close()
        await rm(dataDir, { recursive: true, force: true })
      },
    }
  },
}

const message = (overrides: Partial<OutgoingMail> = {}): OutgoingMail => ({
  from: 'Platform <no-reply@platform.test>',
  to: 'alice@example.com',
  subject: 'Reset your password',
  text: 'Choose a new password: https://app.test/reset-password?token=abc',
  html: '<p><a href="https://app.test/reset-password?token=abc">Choose a new password</a></p>',
  messageId: '<0b6f2a5e-7c1d-4f4e-9a57-1d2b3c4d5e6f@platform.test>',
  ...overrides,
})

describe.each(Object.keys(harnesses))('mail transport contract: %s', (kind) => {
  let h: Harness
  beforeEach(async () => {
    h = await (harnesses[kind] as () => Promise<Harness>)()
  })
  afterEach(async () => {
    await h.close()
  })

  it('delivers to, from, subject, text, html and the Message-ID', async () => {
    await h.transport.send(message())
    const [mail, ...others] = await h.delivered()
    expect(others).toHaveLength(0)
    expect(mail?.recipients).toEqual(['alice@example.com'])
    expect(addresses(mail?.parsed.to)).toEqual(['alice@example.com'])
    expect(mail?.parsed.from?.value).toEqual([{ name: 'Platform', address: 'no-reply@platform.test' }])
    expect(mail?.parsed.subject).toBe('Reset your password')
    expect(mail?.parsed.text?.trim()).toBe('Choose a new password: https://app.test/reset-password?token=abc')
    expect(mail?.parsed.html).toContain(
      '<a href="https://app.test/reset-password?token=abc">Choose a new password</a>',
    )
    expect(mail?.parsed.messageId).toBe('<0b6f2a5e-7c1d-4f4e-9a57-1d2b3c4d5e6f@platform.test>')
  })

  it('does not let CR LF in the subject add a Bcc header or a second recipient', async () => {
    await h.transport.send(message({ subject: 'Hello\r\nBcc: attacker@example.com' }))
    const [mail, ...others] = await h.delivered()
    expect(others).toHaveLength(0)
    expect(mail?.recipients).toEqual(['alice@example.com'])
    expect(mail?.parsed.bcc).toBeUndefined()
    expect(mail?.parsed.headers.has('bcc')).toBe(false)
    expect(mail?.parsed.subject).not.toMatch(/[\r\n]/)
    expect(mail?.parsed.subject?.startsWith('Hello')).toBe(true)
  })

  it('keeps a non-ASCII subject and body intact', async () => {
    await h.transport.send(message({ subject: 'Café — ✓', text: 'Grüße, 日本語 ✓', html: '<p>Grüße ✓</p>' }))
    const [mail] = await h.delivered()
    expect(mail?.parsed.subject).toBe('Café — ✓')
    expect(mail?.parsed.text?.trim()).toBe('Grüße, 日本語 ✓')
    expect(mail?.parsed.html).toContain('<p>Grüße ✓</p>')
  })
})

describe('embedded mail sink', () => {
  it('logs one line per message, without the body or the recipient', async () => {
    const h = await (harnesses['file sink'] as () => Promise<Harness>)()
    try {
      await h.transport.send(message())
      expect(h.logs.lines).toHaveLength(1)
      const line = h.logs.text()
      expect(line).toContain('0b6f2a5e-7c1d-4f4e-9a57-1d2b3c4d5e6f@platform.test')
      expect(line).toContain('.eml')
      expect(line).not.toContain('token=abc')
      expect(line).not.toContain('alice@example.com')
    } finally {
      await h.close()
    }
  })
})

describe('createMailTransport', () => {
  const log = pino({ level: 'silent' })

  it('uses SMTP when platform.mail.smtp.url is set', async () => {
    const transport = createMailTransport(
      testConfig({ 'platform.mail.smtp.url': 'smtp://user:pass@127.0.0.1:2525' }),
      log,
    )
    expect(transport).toBeInstanceOf(SmtpTransport)
    await transport.close()
  })

  it('uses the file sink under <dataDir>/mail when no SMTP URL is set', () => {
    const transport = createMailTransport(testConfig({ 'platform.data-dir': '/tmp/platform-data' }), log)
    expect(transport).toBeInstanceOf(FileSinkTransport)
    expect((transport as FileSinkTransport).directory).toBe(path.join('/tmp/platform-data', 'mail'))
  })

  it('refuses the embedded sink under the production profile, naming the property', () => {
    const config = testConfig({ 'platform.profile': 'production' })
    expect(() => createMailTransport(config, log)).toThrow(ConfigError)
    expect(() => createMailTransport(config, log)).toThrow(/platform\.mail\.smtp\.url.*required/)
  })
})
