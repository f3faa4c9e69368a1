import { type PlatformClient, type SessionState, unwrap } from '../../client/src/index.ts'
import { alertBox, busy, field, guard, h, onSubmit } from './dom.ts'
import { emailSignIn, newPasswordInputs, panel, show } from './signed-out.ts'

// The pages the service's mails link to, the token in the query. Opening one (as often as a person
// or a mail scanner likes) sends nothing: the page says what its button will do, and only the button
// posts the token. Once that succeeded, or the visitor leaves, the console shows as usual at `/`.

/** The pages, as src/http/console.ts serves them. */
export type LinkPath =
  | '/verify-sign-up'
  | '/email-sign-in'
  | '/verify-email'
  | '/accept-invitation'
  | '/reset-password'

const PATHS: LinkPath[] = [
  '/verify-sign-up',
  '/email-sign-in',
  '/verify-email',
  '/accept-invitation',
  '/reset-password',
]

export interface Link {
  path: LinkPath
  /** The link's token; empty when the address lost it (a link cut in two by a mail reader). */
  token: string
}

/** The mailed link this address is, if it is one. */
export function linkAt(location: Location): Link | undefined {
  const path = PATHS.find((p) => p === location.pathname)
  if (!path) return undefined
  return { path, token: new URLSearchParams(location.search).get('token') ?? '' }
}

/** What the page needs of the console around it. */
export interface LinkHost {
  platform: PlatformClient
  /**
   * Runs the button's sign-in; once it succeeded the link is done and the console shows signed in.
   * A failure leaves the page as it was, and is thrown.
   */
  signIn(task: () => Promise<unknown>): Promise<void>
  /** Leaves the page for the console at `/`; `changed` when the account changed (its address). */
  leave(changed?: string): void
}

/**
 * The page of `link` for the session as it is; undefined where the page needs a session first (an
 * email change is confirmed by the account that asked: the sign-in form shows, then this page).
 */
export function linkPage(link: Link, state: SessionState, host: LinkHost): HTMLElement | undefined {
  const root = h('div')
  const view = !link.token
    ? incomplete(host)
    : link.path === '/verify-sign-up'
      ? signUpPage(link.token, state, host)
      : link.path === '/email-sign-in'
        ? emailSignInPage(link.token, state, host, root)
        : link.path === '/verify-email'
          ? state.status === 'signed-in'
            ? emailChangePage(link.token, host, root)
            : undefined
          : passwordPage(link, host, root)
  if (!view) return undefined
  root.append(view)
  return root
}

const leaveButton = (host: LinkHost, label: string) =>
  h(
    'p',
    { class: 'outside-back' },
    h('button', { type: 'button', class: 'link-button', onclick: () => host.leave() }, label),
  )

/** The one button of a page: it posts, and shows a refusal in `alert`. */
function action(label: string, alert: HTMLElement, task: () => Promise<void>) {
  const actions = h('div', { class: 'signin-actions' })
  const submit = h(
    'button',
    { type: 'button', class: 'btn primary', onclick: () => void busy(actions, () => guard(alert, task)) },
    label,
  )
  actions.append(submit)
  return actions
}

const nothingYet = (what: string) =>
  h(
    'p',
    { class: 'hint', id: 'link-unused' },
    `Opening this page changed nothing: ${what} only when you press the button.`,
  )

const otherAccount = (state: SessionState) =>
  state.status === 'signed-in'
    ? h(
        'p',
        { class: 'notice' },
        'This browser is signed in already. Going on signs it in to the account of this link instead.',
      )
    : null

function incomplete(host: LinkHost) {
  return panel(
    'This link is incomplete',
    'The address lacks the part that proves it came from the email. Open the link from the email again, or copy all of it into the address bar.',
    leaveButton(host, 'Go to the console'),
  )
}

function signUpPage(token: string, state: SessionState, host: LinkHost) {
  const alert = alertBox()
  return panel(
    'Create your organization',
    'Confirming proves that the address this link was emailed to is yours: the organization you named at sign-up is created, with you as its first admin, and you are signed in. If you did not sign up yourself, do not confirm: someone else chose the password.',
    otherAccount(state),
    nothingYet('the organization is created'),
    alert,
    action('Confirm and create the organization', alert, () =>
      host.signIn(() => host.platform.verifySignUp({ token })),
    ),
    leaveButton(host, 'Not now'),
  )
}

function emailSignInPage(token: string, state: SessionState, host: LinkHost, root: HTMLElement) {
  const alert = alertBox()
  return panel(
    'Sign in with this link',
    'Signs you in to the account of the address this link was emailed to. If the account has two-factor authentication on, the next step asks for it.',
    otherAccount(state),
    nothingYet('the link is used'),
    alert,
    action('Sign in', alert, () => emailSignIn(host.platform, root, { token }, host.signIn)),
    leaveButton(host, 'Not now'),
  )
}

function emailChangePage(token: string, host: LinkHost, root: HTMLElement) {
  const alert = alertBox()
  return panel(
    'Confirm your new email address',
    'Your account moves to the address this link was emailed to: you sign in with it from now on. Your other sessions are signed out; this one stays.',
    nothingYet('the address changes'),
    alert,
    action('Confirm the new address', alert, async () => {
      unwrap(await host.platform.api.POST('/api/account/email/verify', { body: { token } }))
      const me = unwrap(await host.platform.api.GET('/api/auth/me'))
      show(
        root,
        panel(
          'Email address changed',
          ['Your account signs in as ', h('strong', null, me.email), ' from now on.'],
          h(
            'div',
            { class: 'signin-actions' },
            h(
              'button',
              { type: 'button', class: 'btn primary', onclick: () => host.leave('Email address changed.') },
              'Go to the console',
            ),
          ),
        ),
      )
    }),
    leaveButton(host, 'Not now'),
  )
}

/** An invitation or a password reset: a new password, posted with the token to the confirm endpoint. */
function passwordPage(link: Link, host: LinkHost, root: HTMLElement) {
  const invitation = link.path === '/accept-invitation'
  const alert = alertBox()
  const { next, repeat } = newPasswordInputs()
  const form = h(
    'form',
    { id: 'password-link-form' },
    field(
      invitation ? 'Password' : 'New password',
      next,
      'At least 12 characters, unless your organization was set up otherwise.',
    ),
    field('Repeat the password', repeat),
    h(
      'div',
      { class: 'signin-actions' },
      h(
        'button',
        { type: 'submit', class: 'btn primary' },
        invitation ? 'Accept and set the password' : 'Set the new password',
      ),
    ),
  )
  onSubmit(form, alert, async () => {
    unwrap(
      await host.platform.api.POST('/api/auth/password-reset/confirm', {
        body: { token: link.token, newPassword: next.value },
      }),
    )
    show(
      root,
      panel(
        invitation ? 'Welcome aboard' : 'Password changed',
        invitation
          ? 'Your account is active. Sign in with your email address and the password you chose.'
          : 'Sign in with your email address and the new password. Every session of the account was signed out.',
        h(
          'div',
          { class: 'signin-actions' },
          h('button', { type: 'button', class: 'btn primary', onclick: () => host.leave() }, 'Go to sign-in'),
        ),
      ),
    )
  })
  return panel(
    invitation ? 'Accept your invitation' : 'Choose a new password',
    invitation
      ? 'Choose the password of your new account. Once it is set, the account is active and you sign in with your email address and this password.'
      : 'The new password of the account this link was emailed for. Setting it signs out every session of the account.',
    nothingYet(invitation ? 'the invitation is accepted' : 'the password changes'),
    alert,
    form,
    leaveButton(host, 'Not now'),
  )
}
