// Decorates `app.background`: work started after a response is sent (so the response cannot
// reveal how long it takes), tracked so shutdown waits for it and tests can await it; needs nothing.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

export interface BackgroundTasks {
  /** Runs the work after the current request; a failure is logged, never thrown. */
  run(name: string, work: () => Promise<void>): void
  /** Resolves when every task started so far has ended. */
  idle(): Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    background: BackgroundTasks
  }
}

async function backgroundPlugin(app: FastifyInstance) {
  const running = new Set<Promise<void>>()
  const tasks: BackgroundTasks = {
    run(name, work) {
      const task = new Promise<void>((resolve) => setImmediate(resolve))
        .then(work)
        .catch((error: unknown) => app.log.error({ err: error, task: name }, 'background task failed'))
        .finally(() => running.delete(task))
      running.add(task)
    },
    async idle() {
      while (running.size > 0) await Promise.all([...running])
    },
  }
  app.decorate('background', tasks)
  app.addHook('onClose', () => tasks.idle())
}

export default fp(backgroundPlugin, { name: 'background', fastify: '5.x' })
