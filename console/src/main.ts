import createClient from 'openapi-fetch'
import { createPlatformClient, type SessionState, unwrap } from '../../client/src/index.ts'
import type { ConsoleContext, Me, Screen } from './context.ts'
import { badge, describeError, fill, guard, h, notify, screen, tickRelativeTimes } from './dom.ts'
import { showImpersonation } from './impersonation.ts'
import { type Link, type LinkHost, linkAt, linkPage } from './link-pages.ts'
import type { paths as ResourcePaths } from './resources.schema.ts'
import { accountScreen } from './screens/account.ts'
import { apiKeysScreen } from './screens/api-keys.ts'
import { auditScreen } from './screens/audit.ts'
import { configurationScreen } from './screens/configuration.ts'
import { outboxScreen } from './screens/outbox.ts'
import { purchaseRequestScreen, purchaseRequestsScreen } from './screens/purchase-requests.ts'
import { securityScreen } from './screens/security.ts'
import { ssoScreen } from './screens/sso.ts'
import { usersScreen } from './screens/users.ts'
import { webhookScreen, webhooksScreen } from './screens/webhooks.ts'
import { describeProviderRefusal, setUpSignIn, setUpSsoSignIn } from './sign-in.ts'
import { SIGNED_OUT_SCREENS, show } from './signed-out.ts'

// The console: signed out, the sign-in form (and, by the fragment, sign-up and email sign-in);
// signed in, a navigation between screens addressed by the URL's fragment (#/users,
// #/purchase-requests/<id>), the organization's screens for admins only (the role of the account
// record GET /api/auth/me answers with). Opened at a mailed link (/verify-sign-up?token=…), the
// link's page stands in front of either until its button succeeded or the visitor left it. Every
// call goes through the typed client (client/) or the client generated the same way for the
// console's own resources (./resources.schema.ts), both with the platform's fetch: cookies, and one
// refresh and retry on a 401.

const byId = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T

interface Route {
  name: string
  label: string
  screen: Screen
  admin: boolean
  /** Another screen under the same entry of the navigation (a purchase request's detail). */
  detail?: Screen
}

const ROUTES: Route[] = [
  { name: 'account', label: 'My account', screen: accountScreen, admin: false },
  {
    name: 'purchase-requests',
    label: 'Purchase requests',
    screen: purchaseRequestsScreen,
    detail: purchaseRequestScreen,
    admin: false,
  },
  { name: 'users', label: 'Users', screen: usersScreen, admin: true },
  { name: 'api-keys', label: 'API keys', screen: apiKeysScreen, admin: true },
  { name: 'webhooks', label: 'Webhooks', screen: webhooksScreen, detail: webhookScreen, admin: true },
  { name: 'audit', label: 'Audit events', screen: auditScreen, admin: true },
  { name: 'security', label: 'Security policies', screen: securityScreen, admin: true },
  { name: 'sso', label: 'Single sign-on', screen: ssoScreen, admin: true },
  { name: 'configuration', label: 'Configuration', screen: configurationScreen, admin: true },
  { name: 'outbox', label: 'Outbox', screen: outboxScreen, admin: true },
]
const HOME = 'account'

const platform = createPlatformClient({ onSessionChange: (state) => onSession(state) })
const resources = createClient<ResourcePaths>({ baseUrl: location.origin, fetch: platform.fetch })

let context: ConsoleContext | undefined
// The session the screens are shown for: a refresh of it changes nothing on the page.
let shownSession: string | undefined
// The mailed link the page was opened at, until its button succeeded or the visitor left it.
let link: Link | undefined = linkAt(location)
// Back from an identity provider that the service refused (`?oidc=error&code=…`): what to tell the
// person, once, above the sign-in form or (signed in: a link) the screen the fragment names.
const providerParams = new URLSearchParams(location.search)
let providerRefusal =
  providerParams.get('oidc') === 'error' ? describeProviderRefusal(providerParams.get('code')) : undefined

function showProviderRefusal() {
  if (providerRefusal === undefined) return
  byId('error').textContent = providerRefusal
  providerRefusal = undefined
}

function onSession(state: SessionState) {
  byId('boot').hidden = state.status !== 'unknown'
  if (state.status === 'signed-in') {
    const key = `${state.session.userId}/${state.session.sessionId}`
    if (shownSession !== key) {
      shownSession = key
      void enter()
      showOutside()
    }
    return
  }
  shownSession = undefined
  context = undefined
  leave(state)
  showOutside()
}

const linkHost: LinkHost = {
  platform,
  async signIn(task) {
    // Gone before the sign-in reports itself, so that the console, not the link, shows signed in.
    const kept = link
    link = undefined
    try {
      await task()
    } catch (error) {
      link = kept
      throw error
    }
    leaveLink()
  },
  leave(changed) {
    link = undefined
    leaveLink()
    if (changed && context) {
      void enter()
      notify(changed)
    }
  },
}

/** The console's own address again: the token is not kept in the address bar or the history. */
function leaveLink() {
  history.replaceState(null, '', `/${location.hash}`)
  showOutside()
  // The signed-in screen behind the page takes the title and the keyboard back.
  if (context) route()
}

/**
 * What stands in front of the console's own screens: a mailed link's page, else, signed out, the
 * screen the fragment names (#/sign-up); nothing, and the sign-in form or the signed-in screens show.
 */
function showOutside() {
  const state = platform.state
  const outside = byId('outside')
  const make = link ? undefined : SIGNED_OUT_SCREENS.get(location.hash.replace(/^#\/?/, ''))
  const view =
    state.status === 'unknown'
      ? undefined
      : link
        ? linkPage(link, state, linkHost)
        : state.status === 'signed-out' && make
          ? make(platform, outside)
          : undefined
  document.body.classList.toggle('outside', view !== undefined)
  outside.hidden = view === undefined
  if (view) {
    byId('error').textContent = ''
    show(outside, view)
  } else {
    outside.replaceChildren()
    if (state.status === 'signed-out') document.title = 'Sign in · Platform core console'
  }
}

function showWho(me: Me | undefined) {
  const who = byId('who')
  if (!me) {
    who.textContent = 'Signed in'
    return
  }
  who.classList.remove('sr-only')
  fill(
    who,
    h('span', { class: 'sr-only' }, 'Signed in as '),
    h('span', { class: 'who-email' }, me.email),
    h(
      'span',
      { class: 'who-org' },
      h('span', { class: 'sr-only' }, ', '),
      me.organizationName,
      h('span', { class: 'sr-only' }, ', role '),
      badge(me.role === 'admin' ? 'Admin' : 'Member', me.role === 'admin' ? 'info' : 'neutral'),
    ),
  )
}

/** Signed in: who it is (GET /api/auth/me), then the navigation and the screen the URL names. */
async function enter() {
  const key = shownSession
  byId<HTMLFormElement>('login-form').reset()
  byId('signin').hidden = true
  byId('signin-notice').hidden = true
  byId('error').textContent = ''
  byId('app').hidden = false
  byId('signout').hidden = false
  showWho(undefined)
  fill(byId('app'), h('p', { class: 'list-status' }, 'Loading your account…'))
  let me: Me
  try {
    me = unwrap(await platform.api.GET('/api/auth/me'))
  } catch (error) {
    if (key !== shownSession) return
    fill(
      byId('app'),
      screen(
        'The console could not load your account',
        null,
        h('p', { class: 'alert' }, describeError(error)),
        h('button', { type: 'button', class: 'btn primary', onclick: () => void enter() }, 'Try again'),
      ),
    )
    return
  }
  if (key !== shownSession) return
  context = {
    platform,
    api: platform.api,
    resources,
    me,
    isAdmin: me.role === 'admin',
    async refreshMe() {
      const fresh = unwrap(await platform.api.GET('/api/auth/me'))
      if (context) Object.assign(context, { me: fresh, isAdmin: fresh.role === 'admin' })
      showWho(fresh)
      return fresh
    },
    navigate(hash) {
      if (location.hash === hash) route()
      else location.hash = hash
    },
  }
  showWho(me)
  // While an admin views the console as a member: the banner with the way back, above every screen.
  showImpersonation(byId('impersonation'), context, byId('error'))
  buildNav(context)
  route({ focus: false })
}

function leave(state: SessionState) {
  const who = byId('who')
  who.classList.add('sr-only')
  who.textContent =
    state.status === 'unknown'
      ? 'Restoring session…'
      : state.status === 'signed-out' && state.reason === 'reuse-detected'
        ? 'Signed out: this session was used elsewhere'
        : 'Signed out'
  byId('app').hidden = true
  // Nothing of the signed-in screens stays in the page.
  byId('app').replaceChildren()
  showImpersonation(byId('impersonation'), undefined, byId('error'))
  byId('nav').replaceChildren()
  byId('nav').hidden = true
  byId('menu-toggle').hidden = true
  byId('signout').hidden = true
  document.title = 'Sign in · Platform core console'
  if (state.status !== 'signed-out') return
  byId('signin').hidden = false
  const notice = byId('signin-notice')
  // An email change is confirmed by the account that asked for it: its link's page waits for it.
  const waiting = link?.path === '/verify-email' && link.token !== ''
  notice.hidden = !waiting && state.reason !== 'reuse-detected' && state.reason !== 'expired'
  notice.textContent = waiting
    ? 'Sign in to confirm your new email address, as the account that asked for the change.'
    : state.reason === 'reuse-detected'
      ? 'You were signed out: this session was used from somewhere else. Sign in again, and sign out your other sessions if that was not you.'
      : 'Your session has ended. Sign in again.'
  showProviderRefusal()
  signIn.offerAutofill()
}

function buildNav(current: ConsoleContext) {
  const link = (route: Route) =>
    h('li', null, h('a', { href: `#/${route.name}`, 'data-route': route.name }, route.label))
  const mine = ROUTES.filter((r) => !r.admin)
  const admin = current.isAdmin ? ROUTES.filter((r) => r.admin) : []
  fill(
    byId('nav'),
    h('p', { class: 'nav-group', id: 'nav-you' }, 'You'),
    h('ul', { 'aria-labelledby': 'nav-you' }, mine.map(link)),
    admin.length > 0
      ? [
          h('p', { class: 'nav-group', id: 'nav-org' }, current.me.organizationName),
          h('ul', { 'aria-labelledby': 'nav-org' }, admin.map(link)),
        ]
      : null,
  )
  byId('nav').hidden = false
  byId('menu-toggle').hidden = false
}

/** The screen the fragment names; a member asking for an organization's screen is sent home. */
function route(options: { focus?: boolean } = {}) {
  const current = context
  if (!current) return
  const [name = HOME, ...params] = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean)
  const found = ROUTES.find((r) => r.name === name && (!r.admin || current.isAdmin))
  if (!found) {
    history.replaceState(null, '', `#/${HOME}`)
    route(options)
    return
  }
  const make = params.length > 0 && found.detail ? found.detail : found.screen
  const view = make(current, params.map(decodeURIComponent))
  byId('error').textContent = ''
  showProviderRefusal()
  fill(byId('app'), view)
  // A mailed link's page in front keeps the title and the keyboard.
  if (!link)
    document.title = `${view.querySelector('h1')?.textContent ?? found.label} · Platform core console`
  for (const anchor of byId('nav').querySelectorAll('a')) {
    if (anchor.dataset.route === found.name) anchor.setAttribute('aria-current', 'page')
    else anchor.removeAttribute('aria-current')
  }
  closeMenu()
  if (options.focus !== false && !link) view.querySelector<HTMLElement>('h1')?.focus()
}

function closeMenu() {
  byId('menu-toggle').setAttribute('aria-expanded', 'false')
  document.body.classList.remove('menu-open')
}

window.addEventListener('hashchange', () => {
  // The skip link's fragment is no screen.
  if (location.hash === '#main') return
  if (platform.state.status === 'signed-out') showOutside()
  else route()
})
byId('skip-link').addEventListener('click', (event) => {
  event.preventDefault()
  ;(byId('app').querySelector<HTMLElement>('h1') ?? byId('main')).focus()
})
byId('menu-toggle').addEventListener('click', () => {
  const open = byId('menu-toggle').getAttribute('aria-expanded') !== 'true'
  byId('menu-toggle').setAttribute('aria-expanded', String(open))
  document.body.classList.toggle('menu-open', open)
})
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && document.body.classList.contains('menu-open')) {
    closeMenu()
    byId('menu-toggle').focus()
  }
})
byId('signout').addEventListener('click', () => void guard(byId('error'), () => platform.logout()))

// The self-service flows the service has switched on (src/http/console.ts names them in the page).
const flows =
  document.querySelector<HTMLMetaElement>('meta[name="platform-sign-in"]')?.content.split(' ') ?? []
for (const item of document.querySelectorAll<HTMLElement>('[data-sign-in]'))
  item.hidden = !flows.includes(item.dataset.signIn ?? '')

const signIn = setUpSignIn(platform, byId('error'))
setUpSsoSignIn(platform, byId('error'))
setInterval(tickRelativeTimes, 30_000)

// For the browser's developer tools (and the browser tests): the two clients this page uses.
Object.assign(globalThis, { platformConsole: { platform, resources } })

// Back from an identity provider (src/features/federation): signed in by cookies this client did not
// set, so it asks the service; or the account's second factor is still to give; or refused (its
// message waits above, shown once the session is known).
const fromProvider = providerParams.get('oidc')
if (fromProvider === 'second-factor') history.replaceState(null, '', '/#/oidc-second-factor')
else if (fromProvider) history.replaceState(null, '', `/${location.hash}`)

void guard(byId('error'), async () => {
  if (fromProvider === 'signed-in') await platform.refresh()
  else await platform.restoreSession()
})
