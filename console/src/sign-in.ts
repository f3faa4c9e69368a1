import {
  type ErrorCode,
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
 * sends the browser to the provider and back (to `?oidc=signed-in`, `?oidc=second-factor`, or
 * `?oidc=error&code=…` when the service refused it).
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

/** What a person is told when an identity provider's sign-in or link was refused, by the code. */
const PROVIDER_REFUSALS: Partial<Record<ErrorCode, string>> = {
  OIDC_STATE_INVALID:
    'That sign-in was not started in this browser, took longer than ten minutes or was already used. Start it again.',
  OIDC_RESPONSE_INVALID:
    "The identity provider's answer could not be accepted. Try again, or sign in another way.",
  OIDC_EMAIL_UNVERIFIED:
    'The identity provider has not verified your email address, so it cannot sign you in here.',
  SIGN_UP_DISABLED: 'No account has this email address, and new accounts cannot be created here.',
  IDENTITY_NOT_LINKED:
    'An account with this email address already exists. Sign in to it another way, then link this identity on your account screen.',
  IDENTITY_ALREADY_LINKED: 'This identity is already linked to another account.',
  ACCESS_DENIED:
    'The sign-in was refused: the account is not active, or the link was started in another session. Sign in and try again.',
  SSO_REQUIRED: 'Your organization requires its single sign-on: use "Sign in with SSO" with your work email.',
  SSO_DOMAIN_NOT_VERIFIED: "Your email address is not at a domain your organization's single sign-on covers.",
  SSO_ACCOUNT_IN_OTHER_ORGANIZATION: 'This identity belongs to an account of another organization.',
  IP_NOT_ALLOWED: 'Your organization does not allow signing in from this network.',
  ACCOUNT_LOCKED: 'This account is locked for a while after too many failed attempts.',
  NOT_FOUND: 'That identity provider is no longer offered here.',
  RATE_LIMITED: 'Too many sign-in attempts. Wait a minute, then try again.',
  SERVICE_UNAVAILABLE: 'The identity provider could not be reached. Try again in a moment.',
}

/**
 * The sentence for a refused provider callback (`?oidc=error&code=…`): the code's own, else a
 * general one. The code is shown only when it looks like one of the catalogue's (the address is
 * anyone's to write).
 */
export function describeProviderRefusal(code: string | null): string {
  const known = code !== null && /^[A-Z][A-Z_]{0,63}$/.test(code) ? code : null
  const sentence =
    PROVIDER_REFUSALS[known as ErrorCode] ??
    'Signing in with the identity provider did not succeed. Try again, or sign in another way.'
  return known ? `${sentence} (${known})` : sentence
}

/**
 * "Sign in with SSO": the email field's address goes to POST /api/auth/sso/start, and the browser
 * to its organization's identity provider, which sends it back through the callback signed in.
 */
export function setUpSsoSignIn(platform: PlatformClient, alert: HTMLElement) {
  byId('sso-login').addEventListener('click', () => {
    const email = byId<HTMLInputElement>('signin-username').value.trim()
    alert.textContent = ''
    if (!email) {
      alert.textContent = 'Enter your email address first.'
      return
    }
    void (async () => {
      const { data, error } = await platform.api.POST('/api/auth/sso/start', { body: { email } })
      if (data) location.assign(data.redirectUrl)
      else alert.textContent = describeError(error)
    })()
  })
}
