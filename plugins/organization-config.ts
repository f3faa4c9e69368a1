// Decorates `app.orgConfig` (per-organization runtime configuration, cached and kept fresh across
// instances by LISTEN/NOTIFY) and installs the approval email's subject resolver; needs config, db
// and mail. The listener starts when the app is ready and stops on close.
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { LISTEN_LOST, LISTEN_RESET } from '../src/db/notifications.ts'
import {
  APPROVAL_EMAIL_SUBJECT_KEY,
  approvalEmailSubject,
  ORGANIZATION_CONFIG_CHANNEL,
  OrganizationConfig,
} from '../src/services/organization-config.ts'

declare module 'fastify' {
  interface FastifyInstance {
    orgConfig: OrganizationConfig
  }
}

async function organizationConfigPlugin(app: FastifyInstance) {
  const orgConfig = new OrganizationConfig({ db: app.db, clock: app.clock })
  app.decorate('orgConfig', orgConfig)

  // Read when the message is sent, so a subject changed after approval still applies (spec 6.1).
  app.mail.templates.resolveSubject('purchase_request_approved', async ({ organizationId, data }) =>
    organizationId
      ? approvalEmailSubject(await orgConfig.getValue(organizationId, APPROVAL_EMAIL_SUBJECT_KEY), data.title)
      : undefined,
  )

  let unlisten: (() => Promise<void>) | undefined
  app.addHook('onReady', async () => {
    unlisten = await app.database.listen(ORGANIZATION_CONFIG_CHANNEL, (payload) => {
      if (payload === LISTEN_LOST) app.log.warn('configuration change notifications lost; cache bypassed')
      if (payload === LISTEN_RESET) app.log.info('configuration change notifications resumed')
      orgConfig.applyNotification(payload)
    })
    orgConfig.setListening(true)
  })
  app.addHook('onClose', async () => {
    orgConfig.setListening(false)
    await unlisten?.()
  })
}

export default fp(organizationConfigPlugin, {
  name: 'organization-config',
  fastify: '5.x',
  dependencies: ['config', 'db', 'mail'],
})
