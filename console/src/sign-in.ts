import {
  isPasskeyCeremonyAborted,
  type PlatformClient,
  PlatformError,
  passkeysSupported,
} from '../../client/src/index.ts'
import { describeError } from './dom.ts'

// The sign-in form (console/index.html): password with the one-time code, password with a passkey in
// place of the code, a passkey alone, and the passkeys the browser offers in the email field's
// autofill while the form shows.

const byId = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T

export function setUpSignIn(platform: PlatformClient, alert: HTMLElement) {
  let autofillOffered = false
  const form = byId<HTMLFormElement>('login-form')

  for (const element of document.querySelectorAll<HTMLElement>('.passkey-only'))
    element.hidden = !passkeysSupported()

  /** Runs a sign-in, showing its refusal; a passkey ceremony ended by the next one is no failure. */
  async function attempt(task: () => Promise<void>) {
    alert.textContent = ''
    try {
      await task()
    } catch (error) {
      if (!isPasskeyCeremonyAborted(error)) alert.textContent = describeError(error)
    }
  }

  /**
   * While the sign-in form shows, the email field's autofill offers this site's passkeys; picking one
   * signs in. Any other sign-in ends the offer (the client aborts the ceremony).
   */
  async function offerAutofill() {
    if (autofillOffered || platform.state.status !== 'signed-out' || !passkeysSupported()) return
    autofillOffered = true
    try {
      await platform.loginWithPasskey({ conditional: true })
    } catch (error) {
      // The browser's endings (no autofill, no passkey picked, aborted for another sign-in) are none
      // of the user's doing; the service's refusal of a picked passkey is shown.
      if (error instanceof PlatformError) alert.textContent = describeError(error)
    } finally {
      autofillOffered = false
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault()
    const data = new FormData(form)
    const username = String(data.get('username'))
    const otpCode = String(data.get('otpCode') ?? '').trim()
    // "Sign in with password and passkey": a passkey of the account in place of the one-time code.
    const withPasskey = event.submitter?.getAttribute('value') === 'passkey'
    void attempt(async () => {
      try {
        await platform.login({
          username,
          password: String(data.get('password')),
          ...(withPasskey
            ? { passkey: await platform.passkeyAssertion(username) }
            : otpCode
              ? { otpCode }
              : {}),
        })
      } finally {
        // That ceremony ended the autofill's; offered again while still signed out.
        if (withPasskey) void offerAutofill()
      }
    })
  })

  byId('passkey-login').addEventListener('click', () =>
    attempt(async () => {
      const username = String(new FormData(form).get('username') ?? '').trim()
      try {
        await platform.loginWithPasskey(username ? { username } : {})
      } finally {
        void offerAutofill()
      }
    }),
  )

  void showProviders(platform)

  return { offerAutofill: () => void offerAutofill() }
}

/**
 * "Continue with …" for each deployment-wide OpenID Connect provider: a link to the start, which
 * sends the browser to the provider and back (to `?oidc=signed-in`, or `?oidc=second-factor`).
 */
async function showProviders(platform: PlatformClient) {
  const { data } = await platform.api.GET('/api/auth/oidc/providers')
  const items = data?.items ?? []
  const buttons = byId('oidc-buttons')
  buttons.replaceChildren(
    ...items.map((provider) => {
      const link = document.createElement('a')
      link.className = 'btn secondary wide'
      link.href = `/api/auth/oidc/${encodeURIComponent(provider.id)}/start`
      link.textContent = `Continue with ${provider.name}`
      return link
    }),
  )
  byId('oidc-providers').hidden = items.length === 0
}
