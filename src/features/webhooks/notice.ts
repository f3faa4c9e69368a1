import { html, type MailTemplate } from '../../mail/templates.ts'
import type { DisabledReason } from './tables.ts'

declare module '../../mail/templates.ts' {
  interface MailTemplateData {
    /** Sent to each admin of the organization when the service disables one of its endpoints. */
    webhook_disabled: { url: string; webhookId: string; reason: DisabledReason }
  }
}

type Data = { url: string; webhookId: string; reason: DisabledReason }

const why = (d: Data) =>
  d.reason === 'gone'
    ? 'it answered 410 Gone, which asks for no further deliveries'
    : 'its deliveries kept failing'

/** The notice that an endpoint was disabled; `url` is the endpoint's origin only (a path may hold a token). */
export const webhookDisabledTemplate: MailTemplate<Data> = {
  subject: () => 'A webhook endpoint was disabled',
  text: (d) =>
    [
      `The webhook endpoint ${d.webhookId} at ${d.url} was disabled because ${why(d)}.`,
      '',
      'Nothing more is sent to it until an admin enables it again (PATCH /api/webhooks/{id} with enabled true).',
    ].join('\n'),
  body: (
    d,
  ) => html`<p>The webhook endpoint <code>${d.webhookId}</code> at ${d.url} was disabled because ${why(d)}.</p>
<p>Nothing more is sent to it until an admin enables it again.</p>`,
}
