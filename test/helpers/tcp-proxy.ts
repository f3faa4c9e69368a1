import { createConnection, createServer, type Server, type Socket } from 'node:net'

// A TCP proxy in front of a real dependency (PostgreSQL, S3, SMTP): the reliability tests cut it
// (every open connection reset, new ones refused, as when the server goes down or the network
// partitions) and restore it on the same port, while the service keeps its configuration.

export interface TcpProxy {
  readonly port: number
  /** Resets every connection and refuses new ones until restore(). */
  cut(): Promise<void>
  restore(): Promise<void>
  close(): Promise<void>
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<Socket>()
  const connect = (client: Socket) => {
    const upstream = createConnection(target)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
      socket.on('error', () => {
        client.destroy()
        upstream.destroy()
      })
    }
    client.pipe(upstream).pipe(client)
  }
  let server: Server = createServer(connect)
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => resolve((server.address() as { port: number }).port))
    })
  const port = await listen(0)
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.resetAndDestroy()
      sockets.clear()
      server.close(() => resolve())
    })
  return {
    port,
    cut: stop,
    async restore() {
      server = createServer(connect)
      await listen(port)
    },
    close: stop,
  }
}
