import { type Schemas, unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import {
  alertBox,
  badge,
  button,
  card,
  confirmDialog,
  field,
  fieldText,
  guard,
  h,
  notify,
  onSubmit,
  screen,
  time,
} from '../dom.ts'
import { pagedList } from '../list.ts'

// The organization's single sign-on (admins): its identity provider connection (the client secret is
// sent, never shown), the email domains it claims with the TXT record to publish and their status,
// and the switch that requires SSO of verified-domain members.

type Connection = Schemas['SsoConnection']
type Domain = Schemas['SsoDomain']

const REQUIRED_KEY = 'security.sso-required'
const BASE = '/api/organizations/current/sso'

export function ssoScreen(context: ConsoleContext): HTMLElement {
  const { api, me } = context
  const orgId = me.organizationId

  // The connection ------------------------------------------------------------------------------
  const connectionAlert = alertBox('sso-connection-error')
  const connectionForm = h(
    'form',
    { id: 'sso-connection-form' },
    field(
      'Issuer',
      h('input', { name: 'issuer', type: 'url', required: true, placeholder: 'https://idp.example.com' }),
      'The identity provider’s issuer URL; its discovery document is read from it.',
    ),
    field('Client ID', h('input', { name: 'clientId', required: true, autocomplete: 'off' })),
    field(
      'Client secret',
      h('input', { name: 'clientSecret', type: 'password', required: true, autocomplete: 'new-password' }),
      'Stored sealed; it is never shown again.',
    ),
    field('Name', h('input', { name: 'name', maxlength: 200 }), 'Shown to people signing in (optional).'),
    h(
      'p',
      { class: 'hint' },
      'Register this redirect URI at the provider: ',
      h('code', null, `${location.origin}/api/auth/oidc/callback`),
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Add connection')),
  )
  onSubmit(connectionForm, connectionAlert, async () => {
    const name = fieldText(connectionForm, 'name')
    unwrap(
      await api.POST(`${BASE}/connections`, {
        body: {
          issuer: fieldText(connectionForm, 'issuer'),
          clientId: fieldText(connectionForm, 'clientId'),
          clientSecret: fieldText(connectionForm, 'clientSecret'),
          enabled: true,
          ...(name ? { name } : {}),
        },
      }),
    )
    connectionForm.reset()
    notify('Connection added.')
    await connections.reload()
  })

  const connections = pagedList<Connection>({
    caption: 'Connections',
    tbodyId: 'sso-connections',
    alert: connectionAlert,
    loading: 'Loading the connections…',
    empty: 'No connection yet: nobody signs in with SSO.',
    failed: 'The connections could not be loaded.',
    count: (n) => `${n} connection${n === 1 ? '' : 's'}`,
    load: async () => ({ items: unwrap(await api.GET(`${BASE}/connections`)).items, nextCursor: null }),
    columns: [
      { label: 'Issuer', cell: (c) => h('code', { class: 'strong' }, c.issuer) },
      { label: 'Client ID', cell: (c) => h('code', null, c.clientId) },
      { label: 'State', cell: (c) => (c.enabled ? badge('Enabled', 'good') : badge('Disabled')) },
      {
        label: 'Actions',
        actions: true,
        cell: (c) =>
          h(
            'div',
            { class: 'row-actions' },
            button(
              c.enabled ? 'Disable' : 'Enable',
              () =>
                void guard(connectionAlert, async () => {
                  unwrap(
                    await api.PATCH(`${BASE}/connections/{id}`, {
                      params: { path: { id: c.id } },
                      body: { enabled: !c.enabled },
                    }),
                  )
                  await connections.reload()
                }),
              { small: true, label: `${c.enabled ? 'Disable' : 'Enable'} ${c.issuer}` },
            ),
            button(
              'Remove',
              () =>
                void guard(connectionAlert, async () => {
                  const sure = await confirmDialog({
                    title: `Remove the connection to ${c.issuer}?`,
                    message: 'Its people can no longer sign in through it.',
                    confirm: 'Remove',
                    danger: true,
                  })
                  if (!sure) return
                  unwrap(await api.DELETE(`${BASE}/connections/{id}`, { params: { path: { id: c.id } } }))
                  notify('Connection removed.')
                  await connections.reload()
                }),
              { small: true, variant: 'danger', label: `Remove ${c.issuer}` },
            ),
          ),
      },
    ],
  })

  // Domains ---------------------------------------------------------------------------------------
  const domainAlert = alertBox('sso-domain-error')
  const domainForm = h(
    'form',
    { id: 'sso-domain-form' },
    field(
      'Domain',
      h('input', {
        name: 'domain',
        required: true,
        maxlength: 253,
        placeholder: 'example.com',
        spellcheck: 'false',
      }),
      'Your organization’s email domain (not a free email provider’s, not a public suffix).',
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Claim domain')),
  )
  onSubmit(domainForm, domainAlert, async () => {
    unwrap(await api.POST(`${BASE}/domains`, { body: { domain: fieldText(domainForm, 'domain') } }))
    domainForm.reset()
    notify('Domain claimed: publish its TXT record, then verify.')
    await domains.reload()
  })

  const domains = pagedList<Domain>({
    caption: 'Domains',
    tbodyId: 'sso-domains',
    alert: domainAlert,
    loading: 'Loading the domains…',
    empty: 'No domain claimed yet.',
    failed: 'The domains could not be loaded.',
    count: (n) => `${n} domain${n === 1 ? '' : 's'}`,
    load: async () => ({ items: unwrap(await api.GET(`${BASE}/domains`)).items, nextCursor: null }),
    row: (d, tr) => {
      tr.dataset.domain = d.domain
    },
    columns: [
      { label: 'Domain', cell: (d) => h('code', { class: 'strong' }, d.domain) },
      {
        label: 'TXT record to publish',
        cell: (d) =>
          h('div', null, h('code', null, d.txtRecord.name), h('br'), h('code', null, d.txtRecord.value)),
      },
      {
        label: 'Status',
        cell: (d) =>
          d.status === 'verified'
            ? badge('Verified', 'good')
            : h(
                'span',
                null,
                badge('Pending', 'warn'),
                d.checkedAt ? [' checked ', time(d.checkedAt)] : null,
              ),
      },
      {
        label: 'Actions',
        actions: true,
        cell: (d) =>
          h(
            'div',
            { class: 'row-actions' },
            d.status === 'pending'
              ? button(
                  'Verify',
                  () =>
                    void guard(domainAlert, async () => {
                      const checked = unwrap(
                        await api.POST(`${BASE}/domains/{domain}/verify`, {
                          params: { path: { domain: d.domain } },
                        }),
                      )
                      notify(
                        checked.status === 'verified'
                          ? `${d.domain} verified.`
                          : `The TXT record of ${d.domain} was not seen yet.`,
                      )
                      await domains.reload()
                    }),
                  { small: true, label: `Verify ${d.domain}` },
                )
              : null,
            button(
              'Remove',
              () =>
                void guard(domainAlert, async () => {
                  unwrap(
                    await api.DELETE(`${BASE}/domains/{domain}`, { params: { path: { domain: d.domain } } }),
                  )
                  notify(`${d.domain} removed.`)
                  await domains.reload()
                }),
              { small: true, variant: 'danger', label: `Remove ${d.domain}` },
            ),
          ),
      },
    ],
  })

  // Enforcement -----------------------------------------------------------------------------------
  const enforceAlert = alertBox('sso-required-error')
  const enforce = h('input', { type: 'checkbox', name: 'ssoRequired', id: 'sso-required' })
  enforce.addEventListener('change', () => {
    void guard(enforceAlert, async () => {
      unwrap(
        await api.PUT('/api/organizations/{orgId}/config/{key}', {
          params: { path: { orgId, key: REQUIRED_KEY } },
          body: { value: enforce.checked ? 'true' : 'false' },
        }),
      )
      notify(enforce.checked ? 'SSO is now required.' : 'SSO is no longer required.')
    })
  })
  void guard(enforceAlert, async () => {
    const entries = unwrap(
      await api.GET('/api/organizations/{orgId}/config', { params: { path: { orgId } } }),
    ).items
    enforce.checked = entries.some((entry) => entry.key === REQUIRED_KEY && entry.value === 'true')
  })

  void connections.reload()
  void domains.reload()
  return screen(
    'Single sign-on',
    `How people of ${me.organizationName} sign in with your identity provider.`,
    card({ title: 'Identity provider' }, connectionAlert, connections.element, connectionForm),
    card({ title: 'Email domains' }, domainAlert, domains.element, domainForm),
    card(
      { title: 'Require SSO' },
      enforceAlert,
      h(
        'label',
        { for: 'sso-required' },
        enforce,
        ' Members at verified domains sign in through the identity provider only',
      ),
      h(
        'p',
        { class: 'hint' },
        'Passwords, email links and codes and passkeys alone are refused for them. Admins keep a break-glass way in: password together with a second factor; set one up before switching this on.',
      ),
    ),
  )
}
