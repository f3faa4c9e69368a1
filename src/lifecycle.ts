import { createServer as createNetServer } from 'node:net'
import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'

const SHUTDOWN_GRACE_MS = 25_000

/**
 * Listens, then closes the app (stop accepting, let in-flight requests finish while new ones get
 * 503, close pools through the onClose hooks) before the process exits: with 0 on SIGTERM, SIGINT
 * and the other termination signals, with 1 on an uncaught exception or an unhandled rejection, on
 * a second signal or error while closing, or when closing outlasts the grace period.
 *
 * On a signal, with `platform.server.drain-delay` set, the instance first drains: /health/ready
 * answers 503 while every request is still served as before, for the drain delay, so that a load
 * balancer checking readiness stops sending it requests before it stops accepting them. Closing
 * then ends idle keep-alive connections and, with `connection: close` on their last response, those
 * of the requests still in flight.
 */
export async function serve(app: FastifyInstance): Promise<string> {
  const address = await app.listen({ host: app.config.server.host, port: app.config.server.port })
  const drainMs = app.config.server.drainDelay * 1000
  closeWithGrace(
    {
      delay: SHUTDOWN_GRACE_MS + drainMs,
      logger: app.log,
      // A JS listener cannot run safely after a real fault of these: Node's default ends the process.
      skip: ['SIGSEGV', 'SIGBUS', 'SIGFPE', 'SIGILL'],
      onTimeout: () => app.log.error('graceful shutdown timed out'),
    },
    async (event) => {
      const crashed = 'err' in event
      if (crashed) app.log.fatal({ err: event.err }, 'uncaught error: shutting down')
      else if (drainMs > 0) {
        app.readiness.drain()
        app.log.info({ signal: event.signal, drainDelayMs: drainMs }, 'draining: not ready, still serving')
        await new Promise((resolve) => setTimeout(resolve, drainMs))
        app.log.info({ signal: event.signal }, 'shutting down')
      } else app.log.info({ signal: event.signal }, 'shutting down')
      await app.close().catch((error: unknown) => {
        throw new Error('shutdown failed', { cause: error })
      })
      // close-with-grace exits 0 unless the error is truthy: `Promise.reject()` crashed all the same.
      if (crashed && !event.err) process.exit(1)
    },
  )
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
