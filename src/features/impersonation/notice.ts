import { html, type MailTemplate } from '../../mail/templates.ts'

declare module '../../mail/templates.ts' {
  interface MailTemplateData {
    /** To the user an organization admin started to act as: who, why and until when at most. */
    impersonation_started: ImpersonationNotice
  }
}

interface ImpersonationNotice {
  adminEmail: string
  reason: string
  /** ISO-8601 instant: the latest the impersonation can last. */
  until: string
}

export const impersonationStartedTemplate: MailTemplate<ImpersonationNotice> = {
  subject: () => 'An administrator is viewing your account',
  text: (d) =>
    [
      `${d.adminEmail}, an administrator of your organization, started to use the service as you.`,
      '',
      `Reason given: ${d.reason}`,
      '',
      `It ends when they stop, and at ${d.until} at the latest. Everything they do is recorded in your organization's audit trail under their name.`,
    ].join('\n'),
  body: (
    d,
  ) => html`<p>${d.adminEmail}, an administrator of your organization, started to use the service as you.</p>
<p>Reason given: ${d.reason}</p>
<p>It ends when they stop, and at ${d.until} at the latest. Everything they do is recorded in your organization's audit trail under their name.</p>`,
}
