import { cleanSubject, html, type MailTemplate, type SubjectResolver } from '../../mail/templates.ts'

declare module '../../mail/templates.ts' {
  interface MailTemplateData {
    /** Sent to the creator when a request is approved; `link` opens it in the frontend. */
    purchase_request_approved: { title: string; link?: string }
  }
}

/** The approval email; its subject may be replaced per organization (approvalSubjectResolver). */
export const approvalTemplate: MailTemplate<{ title: string; link?: string }> = {
  subject: (d) => `Purchase request approved: ${d.title}`,
  text: (d) => `Your purchase request "${d.title}" was approved.${d.link ? `\n\n${d.link}` : ''}`,
  body: (d) =>
    d.link
      ? html`<p>Your purchase request <a href="${d.link}"><strong>${d.title}</strong></a> was approved.</p>`
      : html`<p>Your purchase request <strong>${d.title}</strong> was approved.</p>`,
}

/** The organization key holding the subject of the purchase-request approval email. */
export const APPROVAL_EMAIL_SUBJECT_KEY = 'purchase_request.approval_email_subject'

/**
 * The approval email's subject from the organization's configured text: `{title}` is replaced by
 * the purchase request's title, and CR/LF become spaces so the value cannot add a mail header.
 * Undefined (the template's default applies) when nothing usable is configured.
 */
export function approvalEmailSubject(configured: string | undefined, title: string): string | undefined {
  if (configured === undefined || configured.trim() === '') return undefined
  const subject = cleanSubject(configured.replaceAll('{title}', () => title))
  return subject === '' ? undefined : subject
}

/**
 * The send-time subject resolver of the approval email: read when the message is sent, so a
 * subject changed after the approval still applies.
 */
export function approvalSubjectResolver(config: {
  getValue(organizationId: string, key: string): Promise<string | undefined>
}): SubjectResolver<'purchase_request_approved'> {
  return async ({ organizationId, data }) =>
    organizationId
      ? approvalEmailSubject(await config.getValue(organizationId, APPROVAL_EMAIL_SUBJECT_KEY), data.title)
      : undefined
}
