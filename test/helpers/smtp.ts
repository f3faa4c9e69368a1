import { createServer } from 'node:net'
import { type ParsedMail, simpleParser } from 'mailparser'
import { SMTPServer } from 'smtp-server'

export interface ReceivedMail {
  raw: Buffer
  /** The SMTP envelope recipients (RCPT TO), which is who really receives the message. */
  recipients: string[]
  parsed(): Promise<ParsedMail>
}

/** A real SMTP server on 127.0.0.1 and an ephemeral port, keeping every message it accepts. */
export class TestSmtpServer {
  readonly received: ReceivedMail[] = []
  readonly #server: SMTPServer
  readonly #port: number
  #hold: { count: number; waiting: (() => void)[] } | undefined
  #waiters: { count: number; resolve: () => void }[] = []

  private constructor(server: SMTPServer, port: number) {
    this.#server = server
    this.#port = port
  }

  static async start(): Promise<TestSmtpServer> {
    let self: TestSmtpServer | undefined
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onData(stream, session, callback) {
        const chunks: Buffer[] = []
        stream.on('data', (chunk: Buffer) => chunks.push(chunk))
        stream.on('end', () => {
          const raw = Buffer.concat(chunks)
          const recipients = session.envelope.rcptTo.map((r) => r.address)
          self?.accept({ raw, recipients, parsed: () => simpleParser(raw) }, () => callback())
        })
      },
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => resolve())
    })
    const address = server.server.address()
    if (address === null || typeof address === 'string') throw new Error('SMTP server has no port')
    self = new TestSmtpServer(server, address.port)
    return self
  }

  get url(): string {
    return `smtp://127.0.0.1:${this.#port}`
  }

  /**
   * Holds the reply to DATA until `count` messages are waiting at once, then answers them all: a
   * proof that that many senders were in the middle of sending at the same time.
   */
  holdUntilConcurrent(count: number): void {
    this.#hold = { count, waiting: [] }
  }

  /** Resolves once `count` messages have been accepted in total. */
  waitForCount(count: number): Promise<void> {
    if (this.received.length >= count) return Promise.resolve()
    return new Promise((resolve) => this.#waiters.push({ count, resolve }))
  }

  clear(): void {
    this.received.length = 0
  }

  accept(mail: ReceivedMail, reply: () => void): void {
    const finish = () => {
      this.received.push(mail)
      for (const waiter of this.#waiters.filter((w) => this.received.length >= w.count)) waiter.resolve()
      this.#waiters = this.#waiters.filter((w) => this.received.length < w.count)
      reply()
    }
    const hold = this.#hold
    if (!hold) {
      finish()
      return
    }
    hold.waiting.push(finish)
    if (hold.waiting.length >= hold.count) {
      this.#hold = undefined
      for (const release of hold.waiting) release()
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()))
  }
}

/** A local port nothing listens on (bound, then released): connections to it are refused. */
export async function closedPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return address.port
}
