// The emails the service sends, rendered at send time (by the outbox worker) from the template
// name and data stored in the outbox row. Values are HTML-escaped in the HTML part; subjects never
// contain CR or LF, so no value can add a header.

/** The data of the account and security emails, which every deployment sends. */
interface BuiltInTemplateData {
  /**
   * `code` works in place of the link for `codeMinutes`; both are absent from mails queued before
   * invitations and resets carried codes.
   */
  invitation: { link: string; organizationName?: string } & LinkCode
  password_reset: { link: string } & LinkCode
  password_changed: Record<string, never>
  otp_enabled: Record<string, never>
  otp_disabled: Record<string, never>
  /** `name` is the passkey's, as its owner named it. */
  passkey_added: { name: string }
  passkey_removed: { name: string }
  /** `at` is an ISO-8601 instant. */
  new_device_login: { userAgent: string; ipAddress: string; at: string }
  /** A mailed proof of the address: the console link and the six-digit code, each usable once. */
  sign_up_verification: EmailProofData
  /** To an address that already has an account, in place of a sign-up's proof. */
  sign_up_account_exists: Record<string, never>
  email_sign_in: EmailProofData
  /** To an address without an active account, in place of an email sign-in's proof. */
  email_sign_in_no_account: Record<string, never>
  email_change_verification: EmailProofData
  /** To the current address, when a change to another one is asked for. */
  email_change_requested: Record<string, never>
  /** To an address that already has an account, in place of an email change's proof. */
  email_change_address_taken: Record<string, never>
  /** To the former address, once the change is made. */
  email_changed: Record<string, never>
}

/** The link (token in its query) and the code of a mailed proof; `minutes` is how long both last. */
export interface EmailProofData {
  link: string
  code: string
  minutes: number
}

/**
 * The data each template needs, as stored in `mail_outbox.data` (JSON). A feature that sends an
 * email of its own adds its template's data here (`declare module '…/mail/templates.ts'`) and
 * registers the template with `MailTemplates.register` when it is composed.
 */
export interface MailTemplateData extends BuiltInTemplateData {}

export type MailTemplateName = keyof MailTemplateData

export interface RenderedMail {
  subject: string
  text: string
  html: string
}

/** What a subject resolver may consult at send time. */
export interface SubjectContext<K extends MailTemplateName> {
  data: MailTemplateData[K]
  organizationId: string | null
  /** The template's own subject, for resolvers that only sometimes override it. */
  defaultSubject: string
}

/**
 * Produces a template's subject at send time, e.g. from the organization's configuration.
 * Returning null, undefined or a blank string keeps the default subject.
 */
export type SubjectResolver<K extends MailTemplateName> = (
  context: SubjectContext<K>,
) => Promise<string | null | undefined> | string | null | undefined

export interface RenderContext {
  organizationId: string | null
}

/** How one email is rendered from its data. */
export interface MailTemplate<D> {
  subject(data: D): string
  text(data: D): string
  /** The inner HTML; values must be interpolated through `html`. */
  body(data: D): SafeHtml
}

/** A template name that is not in the registry (an outbox row written by a newer or older version). */
export class UnknownTemplateError extends Error {
  constructor(template: string) {
    super(`Unknown mail template '${template}'`)
    this.name = 'UnknownTemplateError'
  }
}

const HTML_ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
}

export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (ch) => HTML_ESCAPES[ch] ?? ch)
}

/** Markup already escaped; only `html` produces it. */
export interface SafeHtml {
  readonly markup: string
}

/** A tagged template that escapes every interpolated value unless it is itself `SafeHtml`. */
export function html(strings: TemplateStringsArray, ...values: unknown[]): SafeHtml {
  let markup = strings[0] ?? ''
  values.forEach((value, i) => {
    const escaped =
      typeof value === 'object' && value !== null && 'markup' in value
        ? (value as SafeHtml).markup
        : escapeHtml(value)
    markup += escaped + (strings[i + 1] ?? '')
  })
  return { markup }
}

/** Subjects are one header line: CR and LF are replaced by a space, so a value can never add a header. */
export function cleanSubject(subject: string): string {
  return subject
    .replace(/[\r\n]+/g, ' ')
    .replace(/\s{2,}/g, ' ')
    .trim()
}

function layout(body: SafeHtml): string {
  return html`<!doctype html>
<html><head><meta charset="utf-8"></head>
<body style="font-family: sans-serif; line-height: 1.5">
${body}
</body></html>`.markup
}

const SECURITY_FOOTER = 'If this was not you, change your password and contact your administrator.'

/** A mail whose proof is a link and a code: what it is for, the action the link names, the rest. */
function proofTemplate(
  subject: string,
  purpose: string,
  action: string,
  ignore: string,
): MailTemplate<EmailProofData> {
  const validity = (d: EmailProofData) =>
    `The link and the code can be used once, within ${d.minutes} minutes. ${ignore}`
  return {
    subject: () => subject,
    text: (d) =>
      [purpose, '', `${action}:`, d.link, '', `Or enter this code: ${d.code}`, '', validity(d)].join('\n'),
    body: (d) =>
      html`<p>${purpose}</p>
<p><a href="${d.link}">${action}</a></p>
<p>Or enter this code: <strong style="font-size: 1.4em; letter-spacing: 0.2em">${d.code}</strong></p>
<p>${validity(d)}</p>`,
  }
}

/** The code an invitation or reset mail carries beside its link. */
interface LinkCode {
  code?: string
  codeMinutes?: number
}

const codeLines = (d: LinkCode): string[] =>
  d.code ? ['', `Or enter this code: ${d.code} (it works for ${d.codeMinutes ?? 15} minutes).`] : []

const codeParagraph = (d: LinkCode) =>
  d.code
    ? html`<p>Or enter this code: <strong style="font-size: 1.4em; letter-spacing: 0.2em">${d.code}</strong> (it works for ${String(d.codeMinutes ?? 15)} minutes).</p>`
    : html``

/** A notice without a link or code. */
function noticeTemplate(subject: string, lines: string[]): MailTemplate<Record<string, never>> {
  return {
    subject: () => subject,
    text: () => lines.join('\n\n'),
    body: () => ({ markup: lines.map((line) => html`<p>${line}</p>`.markup).join('\n') }),
  }
}

const TEMPLATES: { [K in keyof BuiltInTemplateData]: MailTemplate<BuiltInTemplateData[K]> } = {
  invitation: {
    subject: (d) => (d.organizationName ? `You are invited to ${d.organizationName}` : 'You are invited'),
    text: (d) =>
      [
        d.organizationName ? `You have been invited to ${d.organizationName}.` : 'You have been invited.',
        '',
        'Set your password to accept the invitation:',
        d.link,
        ...codeLines(d),
        '',
        'The link can be used once. If you did not expect this invitation, ignore this email.',
      ].join('\n'),
    body: (d) =>
      html`<p>${d.organizationName ? html`You have been invited to <strong>${d.organizationName}</strong>.` : 'You have been invited.'}</p>
<p><a href="${d.link}">Set your password to accept the invitation</a></p>
${codeParagraph(d)}
<p>The link can be used once. If you did not expect this invitation, ignore this email.</p>`,
  },
  password_reset: {
    subject: () => 'Reset your password',
    text: (d) =>
      [
        'Someone asked to reset the password of your account.',
        '',
        'Choose a new password:',
        d.link,
        ...codeLines(d),
        '',
        'The link can be used once and expires soon. If you did not ask for this, ignore this email.',
      ].join('\n'),
    body: (d) =>
      html`<p>Someone asked to reset the password of your account.</p>
<p><a href="${d.link}">Choose a new password</a></p>
${codeParagraph(d)}
<p>The link can be used once and expires soon. If you did not ask for this, ignore this email.</p>`,
  },
  password_changed: {
    subject: () => 'Your password was changed',
    text: () => ['The password of your account was changed.', '', SECURITY_FOOTER].join('\n'),
    body: () => html`<p>The password of your account was changed.</p>
<p>${SECURITY_FOOTER}</p>`,
  },
  otp_enabled: {
    subject: () => 'Two-factor authentication enabled',
    text: () => ['Two-factor authentication was enabled on your account.', '', SECURITY_FOOTER].join('\n'),
    body: () => html`<p>Two-factor authentication was enabled on your account.</p>
<p>${SECURITY_FOOTER}</p>`,
  },
  otp_disabled: {
    subject: () => 'Two-factor authentication disabled',
    text: () => ['Two-factor authentication was disabled on your account.', '', SECURITY_FOOTER].join('\n'),
    body: () => html`<p>Two-factor authentication was disabled on your account.</p>
<p>${SECURITY_FOOTER}</p>`,
  },
  passkey_added: {
    subject: () => 'A passkey was added to your account',
    text: (d) => [`A passkey named "${d.name}" was added to your account.`, '', SECURITY_FOOTER].join('\n'),
    body: (d) => html`<p>A passkey named &ldquo;${d.name}&rdquo; was added to your account.</p>
<p>${SECURITY_FOOTER}</p>`,
  },
  passkey_removed: {
    subject: () => 'A passkey was removed from your account',
    text: (d) =>
      [`The passkey named "${d.name}" was removed from your account.`, '', SECURITY_FOOTER].join('\n'),
    body: (d) => html`<p>The passkey named &ldquo;${d.name}&rdquo; was removed from your account.</p>
<p>${SECURITY_FOOTER}</p>`,
  },
  new_device_login: {
    subject: () => 'New sign-in to your account',
    text: (d) =>
      [
        'Your account was signed in to from a new device.',
        '',
        `Device: ${d.userAgent}`,
        `IP address: ${d.ipAddress}`,
        `Time: ${d.at}`,
        '',
        SECURITY_FOOTER,
      ].join('\n'),
    body: (d) =>
      html`<p>Your account was signed in to from a new device.</p>
<ul>
<li>Device: ${d.userAgent}</li>
<li>IP address: ${d.ipAddress}</li>
<li>Time: ${d.at}</li>
</ul>
<p>${SECURITY_FOOTER}</p>`,
  },
  sign_up_verification: proofTemplate(
    'Confirm your email address',
    'Someone signed up with this email address.',
    'Confirm your address and create your organization',
    'If you did not sign up, ignore this email: nothing is created until the address is confirmed.',
  ),
  sign_up_account_exists: noticeTemplate('Sign-up attempt with your email address', [
    'Someone tried to sign up with your email address, which already has an account.',
    'If it was you, sign in, or reset your password if you have forgotten it. Otherwise ignore this email: nothing was changed.',
  ]),
  email_sign_in: proofTemplate(
    'Your sign-in link',
    'Someone asked to sign in to your account with this email address.',
    'Sign in',
    'If you did not ask for this, ignore this email.',
  ),
  email_sign_in_no_account: noticeTemplate('Sign-in attempt with your email address', [
    'Someone asked to sign in with this email address, but no active account uses it, so no sign-in link was sent.',
    'If it was you, check the address you typed, or ask your organization administrator for an invitation. Otherwise ignore this email.',
  ]),
  email_change_verification: proofTemplate(
    'Confirm your new email address',
    'Someone asked to use this email address for their account.',
    'Confirm the new address',
    'If you did not ask for this, ignore this email: the address is not changed until it is confirmed.',
  ),
  email_change_requested: noticeTemplate('Your email address is about to change', [
    'Someone signed in to your account asked to change its email address. The change is made only once the new address is confirmed.',
    SECURITY_FOOTER,
  ]),
  email_change_address_taken: noticeTemplate('Email change attempt with your address', [
    'Someone asked to move another account to your email address, which already has an account. Nothing was changed.',
    'If it was you, sign in with this address instead.',
  ]),
  email_changed: noticeTemplate('Your email address was changed', [
    'The email address of your account was changed; this address no longer signs in.',
    SECURITY_FOOTER,
  ]),
}

/**
 * The registry the worker renders with. One per app (no module state): a feature that computes a
 * subject at send time installs its resolver with `resolveSubject` when it registers.
 */
export class MailTemplates {
  readonly #templates = new Map<string, MailTemplate<never>>(Object.entries(TEMPLATES))
  readonly #resolvers = new Map<MailTemplateName, SubjectResolver<MailTemplateName>>()

  /** Adds a feature's template (its data declared in `MailTemplateData`); a name is registered once. */
  register<K extends MailTemplateName>(template: K, definition: MailTemplate<MailTemplateData[K]>): void {
    if (this.#templates.has(template)) throw new Error(`the mail template ${template} is registered already`)
    this.#templates.set(template, definition as MailTemplate<never>)
  }

  /** Whether `name` is a template this registry renders. */
  has(name: string): name is MailTemplateName {
    return this.#templates.has(name)
  }

  resolveSubject<K extends MailTemplateName>(template: K, resolver: SubjectResolver<K>): void {
    this.#resolvers.set(template, resolver as unknown as SubjectResolver<MailTemplateName>)
  }

  async render<K extends MailTemplateName>(
    template: K,
    data: MailTemplateData[K],
    context: RenderContext,
  ): Promise<RenderedMail> {
    const definition = this.#templates.get(template) as MailTemplate<MailTemplateData[K]> | undefined
    if (!definition) throw new UnknownTemplateError(template)
    const defaultSubject = definition.subject(data)
    const resolver = this.#resolvers.get(template) as SubjectResolver<K> | undefined
    const resolved = resolver ? await resolver({ data, defaultSubject, ...context }) : undefined
    const subject = cleanSubject(resolved?.trim() ? resolved : defaultSubject)
    return { subject, text: definition.text(data), html: layout(definition.body(data)) }
  }

  /** Renders a stored row: the name and data come from the database, not from typed code. */
  renderStored(template: string, data: unknown, context: RenderContext): Promise<RenderedMail> {
    if (!this.has(template)) throw new UnknownTemplateError(template)
    const stored = typeof data === 'object' && data !== null ? data : {}
    return this.render(template, stored as MailTemplateData[typeof template], context)
  }
}
