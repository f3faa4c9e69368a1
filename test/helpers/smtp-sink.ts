import { SMTPServer } from 'smtp-server'

// A real SMTP server on 127.0.0.1 for tests whose SMTP clients die mid-conversation (a service
// killed with SIGKILL resets its connections): like TestSmtpServer (smtp.ts) it keeps every message
// it accepts, but a connection error is counted instead of being emitted unheard, which would end
// the test process.

export class SmtpSink {
  /** The raw messages accepted, in order. */
  readonly received: Buffer[]
  /** Connections that broke (reset by a killed client). */
  brokenConnections = 0
  readonly #server: SMTPServer
  readonly #port: number

  private constructor(server: SMTPServer, port: number, received: Buffer[]) {
    this.#server = server
    this.#port = port
    this.received = received
  }

  static async start(): Promise<SmtpSink> {
    const received: Buffer[] = []
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onData(stream, _session, callback) {
        const chunks: Buffer[] = []
        stream.on('data', (chunk: Buffer) => chunks.push(chunk))
        stream.on('end', () => {
          received.push(Buffer.concat(chunks))
          callback()
        })
      },
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject)
        resolve()
      })
    })
    const address = server.server.address()
    if (address === null || typeof address === 'string') throw new Error('SMTP server has no port')
    const sink = new SmtpSink(server, address.port, received)
    server.on('error', () => {
      sink.brokenConnections += 1
    })
    return sink
  }

  get url(): string {
    return `smtp://127.0.0.1:${this.#port}`
  }

  /** The Message-ID of each message received (the part before `@`), in order. */
  messageIds(): string[] {
    return this.received.map((raw) => /^Message-ID:\s*<([^@>]+)@/im.exec(raw.toString('utf8'))?.[1] ?? '')
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()))
  }
}
