import { PlatformError, unwrap } from '../../client/src/index.ts'
import type { ConsoleContext, Me } from './context.ts'
import { button, field, fill, guard, h, uid } from './dom.ts'

// Viewing the console as a member of one's organization: the reason asked for first (with the
// one-time code when the admin has two-factor on), and, while it lasts, a banner above every screen
// with the way back. Starting and stopping each set the session cookies of the session to show, so
// a refresh afterwards tells the page (and the other tabs) who is signed in now.

/** Asks why (and the admin's one-time code when needed); null when cancelled. */
function reasonDialog(email: string, askCode: boolean): Promise<{ reason: string; otpCode?: string } | null> {
  return new Promise((resolve) => {
    const titleId = uid('dialog-title')
    const reason = h('textarea', { name: 'reason', required: true, minlength: 3, maxlength: 500, rows: 3 })
    const code = h('input', { name: 'otpCode', inputmode: 'numeric', autocomplete: 'one-time-code' })
    const dialog = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': titleId },
      h(
        'form',
        { method: 'dialog' },
        h('h2', { id: titleId }, `View the console as ${email}?`),
        h(
          'div',
          { class: 'dialog-body' },
          h(
            'p',
            null,
            'You will see what they see for at most an hour. They are emailed your name and the reason, and everything you do is recorded as yours.',
          ),
          field('Reason', reason, 'For example the support ticket you are working on.'),
          askCode ? field('Your one-time code', code, 'Two-factor is on for your account.') : null,
        ),
        h(
          'div',
          { class: 'actions end' },
          h('button', { class: 'btn secondary', value: 'cancel', formnovalidate: true }, 'Cancel'),
          h('button', { class: 'btn primary', value: 'confirm' }, 'View as this user'),
        ),
      ),
    )
    dialog.addEventListener('close', () => {
      const text = reason.value.trim()
      const otpCode = code.value.trim()
      resolve(
        dialog.returnValue === 'confirm' && text !== ''
          ? { reason: text, ...(otpCode ? { otpCode } : {}) }
          : null,
      )
      dialog.remove()
    })
    document.body.append(dialog)
    dialog.showModal()
  })
}

/** "View as": asks for the reason, starts, and shows the console as the member. */
export async function viewAs(context: ConsoleContext, user: { id: string; email: string }): Promise<void> {
  const { me, resources, platform } = context
  const answer = await reasonDialog(user.email, me.otpEnabled)
  if (!answer) return
  const path = { params: { path: { id: user.id } } }
  try {
    unwrap(await resources.POST('/api/users/{id}/impersonation', { ...path, body: answer }))
  } catch (error) {
    // Without a code, a passkey of the admin's proves the second factor.
    if (!(error instanceof PlatformError && error.code === 'OTP_REQUIRED' && me.passkeyCount > 0)) throw error
    const passkey = await platform.passkeyAssertion(me.email)
    unwrap(await resources.POST('/api/users/{id}/impersonation', { ...path, body: { ...answer, passkey } }))
  }
  location.hash = '#/account'
  await platform.refresh()
}

/** The banner while impersonating (nothing otherwise), above every screen. */
export function impersonationBanner(context: ConsoleContext, me: Me, alert: HTMLElement): HTMLElement | null {
  if (!me.impersonatorId) return null
  return h(
    'div',
    { class: 'callout impersonation-banner', role: 'region', 'aria-label': 'Impersonation' },
    h(
      'p',
      null,
      'You are viewing the console as ',
      h('strong', null, me.email),
      '. What you do is recorded as yours.',
    ),
    button(
      'Stop viewing as this user',
      () =>
        void guard(alert, async () => {
          unwrap(await context.api.DELETE('/api/impersonation'))
          // Back in one's own session (or signed out when it ended meanwhile).
          location.hash = '#/users'
          await context.platform.refresh()
        }),
    ),
  )
}

/** Puts the banner (or nothing) into its place above the screens. */
export function showImpersonation(
  place: HTMLElement,
  context: ConsoleContext | undefined,
  alert: HTMLElement,
) {
  const banner = context ? impersonationBanner(context, context.me, alert) : null
  fill(place, banner)
  place.hidden = banner === null
}
