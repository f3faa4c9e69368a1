import dns2 from 'dns2'

// A real DNS server on loopback (the `dns2` package, UDP): TXT records the test publishes and
// withdraws; every other question gets an empty answer.

export class TestDnsServer {
  readonly #server: dns2.DnsServer
  readonly #txt = new Map<string, string[]>()
  /** Every question name asked, lower-case. */
  readonly questions: string[] = []
  port = 0

  private constructor() {
    this.#server = dns2.createServer({
      udp: true,
      handle: (request, send) => {
        const response = dns2.Packet.createResponseFromRequest(request)
        for (const question of request.questions) {
          const name = question.name.toLowerCase()
          this.questions.push(name)
          if (question.type !== dns2.Packet.TYPE.TXT) continue
          for (const value of this.#txt.get(name) ?? []) {
            // The typings ask for a Resource instance; the encoder takes a plain record.
            response.answers.push({
              name: question.name,
              type: dns2.Packet.TYPE.TXT,
              class: dns2.Packet.CLASS.IN,
              ttl: 1,
              data: value,
            } as unknown as dns2.Packet.Resource)
          }
        }
        void send(response)
      },
    })
  }

  static async start(): Promise<TestDnsServer> {
    const server = new TestDnsServer()
    const addresses = await server.#server.listen({ udp: { port: 0, address: '127.0.0.1' } })
    server.port = addresses.udp?.port ?? 0
    return server
  }

  /** The `platform.dns.servers` entry that reaches this server. */
  get address(): string {
    return `127.0.0.1:${this.port}`
  }

  publishTxt(name: string, value: string): void {
    const key = name.toLowerCase()
    this.#txt.set(key, [...(this.#txt.get(key) ?? []), value])
  }

  withdrawTxt(name: string): void {
    this.#txt.delete(name.toLowerCase())
  }

  close(): Promise<void> {
    return this.#server.close()
  }
}
