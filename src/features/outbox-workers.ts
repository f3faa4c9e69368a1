// Starts the three outbox workers (mail, authorization tuples, webhooks) when the app is ready and
// stops them on close, in one order; decorates nothing; needs mail, authz and services, which build
// the workers and expose them (`app.mail.worker`, `app.authz.outbox`, `app.services.webhookWorker`).
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { OutboxKind, OutboxWorker } from '../outbox/engine.ts'

export interface OutboxWorkersOptions {
  /**
   * Per kind, false: the worker does not poll or listen (the CLI; tests drive its `runOnce()`). It
   * is stopped on close all the same, so a run a test started is awaited.
   */
  start: Record<OutboxKind, boolean>
}

async function outboxWorkersPlugin(app: FastifyInstance, options: OutboxWorkersOptions) {
  // Started in this order and stopped in the reverse one: the webhook worker first, since a delivery
  // that disables an endpoint queues mail to its organization's admins.
  const workers: OutboxWorker[] = [app.mail.worker, app.authz.outbox, app.services.webhookWorker]
  app.addHook('onReady', async () => {
    for (const worker of workers) if (options.start[worker.kind]) await worker.start()
  })
  // Before the plugins registered earlier close what the workers deliver through (the mail
  // transport, the authorization server's client, the database).
  app.addHook('onClose', async () => {
    for (const worker of workers.toReversed()) await worker.stop()
  })
}

export default fp(outboxWorkersPlugin, {
  name: 'outbox-workers',
  fastify: '5.x',
  dependencies: ['mail', 'authz', 'services'],
})
