import { createServer as createNetServer } from 'node:net'
import type { FastifyInstance } from 'fastify'

const SHUTDOWN_GRACE_MS = 25_000

/**
 * Listens and shuts down gracefully on SIGTERM/SIGINT: stop accepting, let in-flight requests
 * finish (new ones get 503 while closing), close pools through the onClose hooks, then exit.
 */
export async function serve(app: FastifyInstance): Promise<string> {
  const address = await app.listen({ host: app.config.server.host, port: app.config.server.port })
  let closing = false
  const shutdown = (signal: string) => {
    if (closing) return
    closing = true
    app.log.info({ signal }, 'shutting down')
    const force = setTimeout(() => {
      app.log.error('graceful shutdown timed out')
      process.exit(1)
    }, SHUTDOWN_GRACE_MS)
    force.unref()
    app.close().then(
      () => process.exit(0),
      (error: unknown) => {
        app.log.error({ err: error }, 'shutdown failed')
        process.exit(1)
      },
    )
  }
  process.once('SIGTERM', () => shutdown('SIGTERM'))
  process.once('SIGINT', () => shutdown('SIGINT'))
  return address
}

/** Startup failures a user can fix: one line, no stack trace. */
const EXPLAINED = new Set(['ConfigError', 'EmbeddedDatabaseBusyError'])

/** Prints a startup failure (one line for what the user can fix, with the stack otherwise), and exits. */
export function exitOnStartupError(error: unknown, port?: number): never {
  const message = error instanceof Error ? error.message : String(error)
  if ((error as NodeJS.ErrnoException)?.code === 'EADDRINUSE') {
    process.stderr.write(
      `Port ${port ?? ''} is already in use: stop what listens there, or pick another port, e.g. PORT=${(port ?? 8080) + 1} npm run dev (platform.server.port)\n`,
    )
    process.exit(1)
  }
  const explained = error instanceof Error && EXPLAINED.has(error.name)
  process.stderr.write(`${explained ? message : ((error as Error)?.stack ?? message)}\n`)
  process.exit(1)
}

/** A port that is free now on `host` (a listener on port 0, closed again). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createNetServer()
    probe.once('error', reject)
    probe.listen(0, host, () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}
