import { type PlatformClient, PlatformError, passkeysSupported, unwrap } from '../../client/src/index.ts'
import { alertBox, busy, type Child, field, fieldText, fill, guard, h, onSubmit } from './dom.ts'

// The screens a signed-out visitor reaches from the sign-in form, addressed by the fragment:
// #/sign-up (a new organization and its first admin) and #/email-sign-in (a link and code mailed to
// the account's address). Each asks for a mail, then takes the mail's code, which works in any
// browser; the mail's link opens a page of its own (link-pages.ts). Whether the service has the flow
// switched on is its answer to the first request: 404 NOT_FOUND, shown with its detail.

/** A screen of the signed-out area: its heading (focused when shown), a sentence, its content. */
export const panel = (title: string, lede: Child, ...children: Child[]) =>
  h(
    'div',
    { class: 'outside-screen' },
    h('h1', { tabindex: '-1' }, title),
    lede ? h('p', { class: 'lede' }, lede) : null,
    ...children,
  )

/** Replaces the screen shown in `root` and moves the keyboard to its heading. */
export function show(root: HTMLElement, view: HTMLElement) {
  fill(root, view)
  document.title = `${view.querySelector('h1')?.textContent ?? 'Platform core'} · Platform core console`
  view.querySelector<HTMLElement>('h1')?.focus()
}

export const backToSignIn = () => h('p', { class: 'outside-back' }, h('a', { href: '#/' }, 'Back to sign in'))

const emailInput = (value = '') =>
  h('input', { name: 'email', type: 'email', autocomplete: 'email', required: true, maxlength: 320, value })

const codeInput = () =>
  h('input', {
    name: 'code',
    inputmode: 'numeric',
    autocomplete: 'one-time-code',
    required: true,
    pattern: '[0-9]{6}',
    maxlength: 6,
    title: 'The six digits of the mail',
  })

const submit = (label: string) =>
  h('div', { class: 'signin-actions' }, h('button', { type: 'submit', class: 'btn primary' }, label))

/** The way to the code form for a visitor whose email has arrived already. */
const haveACode = (open: () => void) =>
  h(
    'p',
    { class: 'outside-back' },
    h('button', { type: 'button', class: 'link-button', onclick: open }, 'I have a code'),
  )

/**
 * The mail has gone (or, for an address that cannot use it, a notice has): the address and the code
 * it carries, posted by `verify`.
 */
function checkMail(options: {
  email: string
  what: string
  verifyLabel: string
  verify: (email: string, code: string) => Promise<void>
  again: () => void
}) {
  const alert = alertBox()
  const form = h(
    'form',
    { class: 'code-form' },
    field('Email', emailInput(options.email)),
    field('Code from the email', codeInput(), 'Six digits.'),
    submit(options.verifyLabel),
  )
  onSubmit(form, alert, () => options.verify(fieldText(form, 'email'), fieldText(form, 'code')))
  return panel(
    'Check your email',
    options.email
      ? [
          'If ',
          h('strong', null, options.email),
          ` can ${options.what}, a link and a six-digit code are on their way to it. Open the link, or enter the code here (in this browser or any other). The email says how long they last.`,
        ]
      : `Enter the address and the six-digit code of the email. The link in the email works as well.`,
    alert,
    form,
    h(
      'p',
      { class: 'outside-back' },
      h('button', { type: 'button', class: 'link-button', onclick: options.again }, 'Send a new email'),
    ),
    backToSignIn(),
  )
}

/** #/sign-up: the address, a password and the organization's name; then the mail's code. */
function signUpScreen(platform: PlatformClient, root: HTMLElement) {
  const askForm = () => {
    const alert = alertBox()
    const password = h('input', {
      name: 'password',
      type: 'password',
      autocomplete: 'new-password',
      required: true,
      maxlength: 256,
    })
    const form = h(
      'form',
      { id: 'sign-up-form' },
      field('Email', emailInput()),
      field('Password', password, 'At least 12 characters.'),
      field(
        'Organization name',
        h('input', {
          name: 'organizationName',
          autocomplete: 'organization',
          required: true,
          maxlength: 100,
        }),
        'Your company or team. You become its first admin.',
      ),
      submit('Create the organization'),
    )
    onSubmit(form, alert, async () => {
      const email = fieldText(form, 'email')
      unwrap(
        await platform.api.POST('/api/auth/sign-up', {
          body: { email, password: password.value, organizationName: fieldText(form, 'organizationName') },
        }),
      )
      show(root, codeStep(email))
    })
    return panel(
      'Create an organization',
      'An organization of your own, with you as its first admin. Nothing is created until you confirm your address with the link or code we email you.',
      alert,
      form,
      haveACode(() => show(root, codeStep(''))),
      backToSignIn(),
    )
  }
  const codeStep = (email: string) =>
    checkMail({
      email,
      what: 'sign up',
      verifyLabel: 'Confirm and create the organization',
      verify: async (address, code) => {
        await platform.verifySignUp({ email: address, code })
      },
      again: () => show(root, askForm()),
    })
  return askForm()
}

/** The proof of an email sign-in: the link's token, or the address and the code. */
export type SignInProof = { token: string } | { email: string; code: string }

/**
 * Signs in with a mailed proof. When the account has a second factor the service answers 401
 * OTP_REQUIRED (the proof stays usable), and `root` asks for it; `run` wraps each attempt (the link's
 * page leaves its address once one succeeds).
 */
export async function emailSignIn(
  platform: PlatformClient,
  root: HTMLElement,
  proof: SignInProof,
  run: (task: () => Promise<unknown>) => Promise<void> = async (task) => {
    await task()
  },
) {
  try {
    await run(() => platform.verifyEmailSignIn(proof))
  } catch (error) {
    if (!(error instanceof PlatformError && error.code === 'OTP_REQUIRED')) throw error
    show(root, secondFactor(platform, proof, run))
  }
}

function secondFactor(
  platform: PlatformClient,
  proof: SignInProof,
  run: (task: () => Promise<unknown>) => Promise<void>,
) {
  const alert = alertBox()
  const form = h(
    'form',
    { id: 'second-factor-form' },
    field(
      'One-time code',
      h('input', { name: 'otpCode', inputmode: 'numeric', autocomplete: 'one-time-code', required: true }),
      'From your authenticator app, or one of your backup codes.',
    ),
    submit('Sign in'),
  )
  onSubmit(form, alert, async () => {
    const otpCode = fieldText(form, 'otpCode').replaceAll(' ', '')
    await run(() => platform.verifyEmailSignIn({ ...proof, otpCode }))
  })
  const view = panel('Two-factor authentication', 'Your account asks for a second step.', alert, form)
  if (passkeysSupported())
    view.append(
      h('p', { class: 'divider' }, h('span', null, 'or')),
      h(
        'button',
        {
          type: 'button',
          class: 'btn secondary wide',
          onclick: () =>
            void busy(view, () =>
              guard(alert, () =>
                run(async () =>
                  platform.verifyEmailSignIn({
                    ...proof,
                    passkey: await platform.passkeyAssertion('email' in proof ? proof.email : undefined),
                  }),
                ),
              ),
            ),
        },
        'Use a passkey instead',
      ),
    )
  view.append(backToSignIn())
  return view
}

/** #/email-sign-in: the address; then the mail's code (and the second factor, when there is one). */
function emailSignInScreen(platform: PlatformClient, root: HTMLElement) {
  const askForm = () => {
    const alert = alertBox()
    const form = h(
      'form',
      { id: 'email-sign-in-form' },
      field('Email', h('input', { name: 'email', type: 'email', autocomplete: 'username', required: true })),
      submit('Email me a link and code'),
    )
    onSubmit(form, alert, async () => {
      const email = fieldText(form, 'email')
      unwrap(await platform.api.POST('/api/auth/email-sign-in', { body: { email } }))
      show(root, codeStep(email))
    })
    return panel(
      'Sign in with email',
      'We email you a link and a six-digit code; either signs you in, once. No password needed.',
      alert,
      form,
      haveACode(() => show(root, codeStep(''))),
      backToSignIn(),
    )
  }
  const codeStep = (email: string) =>
    checkMail({
      email,
      what: 'sign in',
      verifyLabel: 'Sign in',
      verify: (address, code) => emailSignIn(platform, root, { email: address, code }),
      again: () => show(root, askForm()),
    })
  return askForm()
}

/** A new password and its repetition; the browser says why before anything is sent when they differ. */
export function newPasswordInputs() {
  const next = h('input', {
    name: 'newPassword',
    type: 'password',
    autocomplete: 'new-password',
    required: true,
    maxlength: 256,
  })
  const repeat = h('input', {
    name: 'repeat',
    type: 'password',
    autocomplete: 'new-password',
    required: true,
  })
  const match = () => repeat.setCustomValidity(repeat.value === next.value ? '' : 'The two passwords differ')
  next.addEventListener('input', match)
  repeat.addEventListener('input', match)
  return { next, repeat }
}

/**
 * The code of an invitation or reset mail with the new password, from any browser: the same confirm
 * endpoint as the mail's link, given the address and the code instead of the token.
 */
function passwordCodeForm(
  platform: PlatformClient,
  root: HTMLElement,
  options: { email: string; title: string; lede: Child; action: string; done: string; again?: () => void },
) {
  const alert = alertBox()
  const { next, repeat } = newPasswordInputs()
  const form = h(
    'form',
    { id: 'password-code-form', class: 'code-form' },
    field('Email', emailInput(options.email)),
    field('Code from the email', codeInput(), 'Six digits.'),
    field('New password', next, 'At least 12 characters, unless your organization was set up otherwise.'),
    field('Repeat the password', repeat),
    submit(options.action),
  )
  onSubmit(form, alert, async () => {
    unwrap(
      await platform.api.POST('/api/auth/password-reset/confirm', {
        body: { email: fieldText(form, 'email'), code: fieldText(form, 'code'), newPassword: next.value },
      }),
    )
    show(
      root,
      panel(
        'Password set',
        options.done,
        h('div', { class: 'signin-actions' }, h('a', { class: 'btn primary', href: '#/' }, 'Go to sign-in')),
      ),
    )
  })
  return panel(
    options.title,
    options.lede,
    alert,
    form,
    options.again
      ? h(
          'p',
          { class: 'outside-back' },
          h('button', { type: 'button', class: 'link-button', onclick: options.again }, 'Send a new email'),
        )
      : null,
    backToSignIn(),
  )
}

/**
 * #/oidc-second-factor: an identity provider signed the visitor in, and the account asks for its
 * one-time code (the callback holds the sign-in for five minutes in a cookie of its own).
 */
function oidcSecondFactorScreen(platform: PlatformClient) {
  const alert = alertBox()
  const form = h(
    'form',
    { id: 'oidc-second-factor-form' },
    field(
      'One-time code',
      h('input', { name: 'otpCode', inputmode: 'numeric', autocomplete: 'one-time-code', required: true }),
      'From your authenticator app, or a backup code.',
    ),
    submit('Sign in'),
  )
  onSubmit(form, alert, async () => {
    await platform.completeOidcSignIn({ otpCode: fieldText(form, 'otpCode') })
    history.replaceState(null, '', '/')
  })
  return panel(
    'Two-factor sign-in',
    'Your identity provider signed you in; your account also needs its one-time code.',
    alert,
    form,
    backToSignIn(),
  )
}

/** #/password-reset: the address; then the mail's code and the new password (or the mail's link). */
function passwordResetScreen(platform: PlatformClient, root: HTMLElement) {
  const done =
    'Sign in with your email address and the new password. Every session of the account was signed out.'
  const askForm = () => {
    const alert = alertBox()
    const form = h(
      'form',
      { id: 'password-reset-form' },
      field('Email', emailInput()),
      submit('Email me a link and code'),
    )
    onSubmit(form, alert, async () => {
      const email = fieldText(form, 'email')
      unwrap(await platform.api.POST('/api/auth/password-reset/request', { body: { email } }))
      show(root, codeStep(email))
    })
    return panel(
      'Reset your password',
      'We email the account a link and a six-digit code; either sets a new password, once.',
      alert,
      form,
      haveACode(() => show(root, codeStep(''))),
      backToSignIn(),
    )
  }
  const codeStep = (email: string): HTMLElement =>
    passwordCodeForm(platform, root, {
      email,
      title: 'Check your email',
      lede: email
        ? [
            'If ',
            h('strong', null, email),
            ' has an account, a link and a six-digit code are on their way to it. Open the link, or enter the code and your new password here.',
          ]
        : 'Enter the address and the six-digit code of the email, and your new password.',
      action: 'Set the new password',
      done,
      again: () => show(root, askForm()),
    })
  return askForm()
}

/** #/invitation: the invited address, the invitation's code and the password of the new account. */
function invitationScreen(platform: PlatformClient, root: HTMLElement) {
  return passwordCodeForm(platform, root, {
    email: '',
    title: 'Accept an invitation',
    lede: 'Enter the address the invitation went to, the six-digit code it carries, and the password of your account. The link in the email works as well.',
    action: 'Accept and set the password',
    done: 'Your account is active. Sign in with your email address and the password you chose.',
  })
}

/** The signed-out screens by the fragment's name. */
export const SIGNED_OUT_SCREENS = new Map<
  string,
  (platform: PlatformClient, root: HTMLElement) => HTMLElement
>([
  ['sign-up', signUpScreen],
  ['email-sign-in', emailSignInScreen],
  ['password-reset', passwordResetScreen],
  ['invitation', invitationScreen],
  ['oidc-second-factor', oidcSecondFactorScreen],
])
