import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'

// A webhook receiver for tests: a real HTTP server on 127.0.0.1 that keeps every request it gets
// (path, headers, raw body) and answers each with the next status of its script (200 once the
// script is used up; a 3xx carries a Location to /elsewhere).

export interface ReceivedWebhook {
  path: string
  headers: IncomingHttpHeaders
  body: string
}

export class WebhookReceiver {
  readonly received: ReceivedWebhook[] = []
  #script: number[] = []
  #hang = false
  readonly #server: Server
  #url = ''

  private constructor(server: Server) {
    this.#server = server
  }

  static async start(): Promise<WebhookReceiver> {
    const receiver: WebhookReceiver = new WebhookReceiver(
      createServer((request, response) => {
        const chunks: Buffer[] = []
        request.on('data', (chunk: Buffer) => chunks.push(chunk))
        request.on('end', () => {
          receiver.received.push({
            path: request.url ?? '',
            headers: request.headers,
            body: Buffer.concat(chunks).toString('utf8'),
          })
          if (receiver.#hang) return
          const status = receiver.#script.shift() ?? 200
          if (status >= 300 && status < 400) response.setHeader('location', `${receiver.#url}/elsewhere`)
          response.statusCode = status
          response.end('ok')
        })
      }),
    )
    await new Promise<void>((resolve) => receiver.#server.listen(0, '127.0.0.1', resolve))
    receiver.#url = `http://127.0.0.1:${(receiver.#server.address() as AddressInfo).port}`
    return receiver
  }

  /** The receiver's base URL (http://127.0.0.1:port). */
  get url(): string {
    return this.#url
  }

  /** The statuses the next requests are answered with, in order. */
  answer(...statuses: number[]): void {
    this.#script = statuses
  }

  /** Never answer (a receiver that hangs), until `hang(false)`. */
  hang(on = true): void {
    this.#hang = on
  }

  /** The requests to a path. */
  to(path: string): ReceivedWebhook[] {
    return this.received.filter((r) => r.path === path)
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
  }
}
