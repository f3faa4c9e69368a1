// Decorates `app.mail` (sealing of message data, the delivery worker, the transport, the template
// registry); needs config and db. The worker is started and stopped with the other outbox workers
// (src/features/outbox-workers.ts).
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { jwtSecrets } from '../config.ts'
import { MailOutboxWorker, mailOutboxBox, type SealedMailData, sealMailData } from './outbox.ts'
import { MailTemplates } from './templates.ts'
import { createMailTransport, type MailTransport } from './transports.ts'

export interface Mail {
  /** Seals template data that carries a secret (a one-time token link) for the outbox. */
  seal(data: Record<string, unknown>): SealedMailData
  worker: MailOutboxWorker
  transport: MailTransport
  /** Features install send-time subject resolvers here (`templates.resolveSubject`). */
  templates: MailTemplates
}

declare module 'fastify' {
  interface FastifyInstance {
    mail: Mail
  }
}

export interface MailPluginOptions {
  /** A transport owned by the caller (tests); the app then does not close it. */
  transport?: MailTransport
}

async function mailPlugin(app: FastifyInstance, options: MailPluginOptions) {
  const owned = options.transport === undefined
  const transport = options.transport ?? createMailTransport(app.config, app.log)
  const templates = new MailTemplates()
  const box = mailOutboxBox(jwtSecrets(app.config))
  const worker = new MailOutboxWorker({
    box,
    db: app.db,
    transport,
    clock: app.clock,
    from: app.config.mail.from,
    log: app.log.child({ component: 'mail' }),
    templates,
    listen: app.database.listen,
  })
  app.decorate('mail', {
    seal: (data) => sealMailData(box, data),
    worker,
    transport,
    templates,
  })

  if (owned) app.addHook('onClose', () => transport.close())
}

export default fp(mailPlugin, { name: 'mail', fastify: '5.x', dependencies: ['config', 'db'] })
