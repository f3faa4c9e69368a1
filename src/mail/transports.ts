import { randomBytes } from 'node:crypto'
import { mkdir, rename, writeFile } from 'node:fs/promises'
import path from 'node:path'
import type { FastifyBaseLogger } from 'fastify'
import type { Transporter } from 'nodemailer'
import { type Clock, systemClock } from '../clock.ts'
import { type Config, ConfigError } from '../config.ts'
import { cleanSubject } from './templates.ts'

// The mail port: SMTP when platform.mail.smtp.url is set, otherwise an embedded sink
// that stores each message as an .eml file. Both build the message with nodemailer, so the bytes
// a developer opens from the sink are the ones an SMTP server would receive. nodemailer (about
// 10 MB of a process's memory) is loaded with the first message, not at start-up.

let nodemailerModule: Promise<typeof import('nodemailer')> | undefined
const loadNodemailer = () => (nodemailerModule ??= import('nodemailer'))

/** A rendered message, ready to leave the service. */
export interface OutgoingMail {
  from: string
  to: string
  subject: string
  text: string
  html: string
  /** The full Message-ID header value, `<left@right>`; the same on every retry of one message. */
  messageId: string
}

export interface MailTransport {
  /** Resolves once the message was accepted (by the SMTP server, or written to disk); throws otherwise. */
  send(message: OutgoingMail): Promise<void>
  close(): Promise<void>
}

export type MailLogger = Pick<FastifyBaseLogger, 'info' | 'warn'>

const CONNECTION_TIMEOUT_MS = 5_000
const GREETING_TIMEOUT_MS = 5_000
const SOCKET_TIMEOUT_MS = 10_000

/** The nodemailer message: every header value single-line, nothing fetched from files or URLs. */
function mailOptions(message: OutgoingMail) {
  return {
    from: message.from,
    to: message.to,
    subject: cleanSubject(message.subject),
    text: message.text,
    html: message.html,
    messageId: message.messageId,
    disableFileAccess: true,
    disableUrlAccess: true,
  }
}

/** SMTP through nodemailer: `smtp://user:pass@host:port`, or `smtps://` for TLS from the first byte. */
export class SmtpTransport implements MailTransport {
  readonly #url: string
  #transporter: Promise<Transporter> | undefined

  constructor(url: string) {
    this.#url = url
  }

  async send(message: OutgoingMail): Promise<void> {
    this.#transporter ??= loadNodemailer().then(({ default: nodemailer }) =>
      nodemailer.createTransport({
        url: this.#url,
        connectionTimeout: CONNECTION_TIMEOUT_MS,
        greetingTimeout: GREETING_TIMEOUT_MS,
        socketTimeout: SOCKET_TIMEOUT_MS,
        dnsTimeout: CONNECTION_TIMEOUT_MS,
      }),
    )
    await (await this.#transporter).sendMail(mailOptions(message))
  }

  async close(): Promise<void> {
    ;(await this.#transporter)?.close()
  }
}

export interface FileSinkOptions {
  /** Where the .eml files go (`<dataDir>/mail`). */
  directory: string
  log: MailLogger
  /** Names files by time, so a listing is in sending order. */
  clock?: Clock
}

/** The embedded sink: one .eml file per message and one log line, never the body. */
export class FileSinkTransport implements MailTransport {
  readonly #directory: string
  readonly #log: MailLogger
  readonly #clock: Clock
  #composer: Promise<Transporter> | undefined
  #ready: Promise<unknown> | undefined

  constructor(options: FileSinkOptions) {
    this.#directory = options.directory
    this.#log = options.log
    this.#clock = options.clock ?? systemClock
  }

  get directory(): string {
    return this.#directory
  }

  async send(message: OutgoingMail): Promise<void> {
    this.#composer ??= loadNodemailer().then(({ default: nodemailer }) =>
      nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' }),
    )
    const info = await (await this.#composer).sendMail(mailOptions(message))
    if (!Buffer.isBuffer(info.message)) throw new Error('the stream transport did not return a buffer')
    this.#ready ??= mkdir(this.#directory, { recursive: true })
    await this.#ready
    const stamp = this.#clock.now().toISOString().replace(/[:.]/g, '-')
    const idPart = message.messageId.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^_+|_+$/g, '')
    const file = path.join(this.#directory, `${stamp}-${idPart}.eml`)
    // Written under a temporary name and renamed, so a reader never sees half a message.
    const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`
    await writeFile(temporary, info.message, { mode: 0o600 })
    await rename(temporary, file)
    this.#log.info(
      { messageId: message.messageId, file, subject: cleanSubject(message.subject) },
      'mail stored',
    )
  }

  async close(): Promise<void> {
    ;(await this.#composer)?.close()
  }
}

/** SMTP when platform.mail.smtp.url is set; the file sink otherwise, never under the production profile. */
export function createMailTransport(config: Config, log: MailLogger): MailTransport {
  const url = config.mail.smtp.url
  if (url) {
    if (!/^smtps?:\/\//i.test(url)) {
      throw new ConfigError('platform.mail.smtp.url', 'must start with smtp:// or smtps://')
    }
    return new SmtpTransport(url)
  }
  if (config.profile === 'production') {
    throw new ConfigError('platform.mail.smtp.url', 'is required under the production profile')
  }
  return new FileSinkTransport({ directory: path.join(config.dataDir, 'mail'), log })
}
