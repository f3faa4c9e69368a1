import { PlatformError, unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import { alertBox, card, confirmDialog, field, guard, h, notify, onSubmit, screen } from '../dom.ts'

// The organization's security policies (admins): a second factor required of every member (after a
// grace), the longest a session lasts from its sign-in, and the addresses the organization's users
// and API keys may call from. Each is a `security.*` configuration entry; an empty field removes it.

const KEYS = {
  mfaRequired: 'security.mfa-required',
  mfaGrace: 'security.mfa-grace',
  sessionMaxAge: 'security.session-max-age',
  ipAllowlist: 'security.ip-allowlist',
} as const

export function securityScreen(context: ConsoleContext): HTMLElement {
  const { api, me } = context
  const orgId = me.organizationId
  const alert = alertBox('security-error')

  const mfaRequired = h('input', { type: 'checkbox', name: 'mfaRequired' })
  const mfaGrace = h('input', {
    name: 'mfaGrace',
    placeholder: '7d',
    autocomplete: 'off',
    spellcheck: 'false',
  })
  const sessionMaxAge = h('input', {
    name: 'sessionMaxAge',
    placeholder: '8h',
    autocomplete: 'off',
    spellcheck: 'false',
  })
  const ipAllowlist = h('textarea', {
    name: 'ipAllowlist',
    rows: 3,
    placeholder: '203.0.113.0/24, 2001:db8::/32',
    spellcheck: 'false',
  })
  const form = h(
    'form',
    { id: 'security-form' },
    h(
      'div',
      { class: 'field' },
      h('label', null, mfaRequired, ' Require a second factor (one-time code or passkey) of every member'),
    ),
    field(
      'Grace period',
      mfaGrace,
      'How long members without one keep working after this is turned on, e.g. 7d.',
    ),
    field(
      'Session maximum age',
      sessionMaxAge,
      'A session ends this long after its sign-in, e.g. 8h; empty: the service’s default.',
    ),
    field(
      'Allowed addresses',
      ipAllowlist,
      'Comma-separated IPv4 or IPv6 CIDRs; requests of your users and API keys from elsewhere are refused. Empty: any address.',
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Save policies')),
  )

  const put = async (key: string, value: string, confirm = false) =>
    unwrap(
      await api.PUT('/api/organizations/{orgId}/config/{key}', {
        params: { path: { orgId, key }, query: confirm ? { confirm: true } : {} },
        body: { value },
      }),
    )
  const remove = async (key: string) =>
    unwrap(await api.DELETE('/api/organizations/{orgId}/config/{key}', { params: { path: { orgId, key } } }))
  /** Stores a value, or removes the entry when the field is empty. */
  const save = (key: string, value: string) => (value === '' ? remove(key) : put(key, value))

  onSubmit(form, alert, async () => {
    await save(KEYS.mfaGrace, mfaGrace.value.trim())
    await save(KEYS.sessionMaxAge, sessionMaxAge.value.trim())
    await save(KEYS.mfaRequired, mfaRequired.checked ? 'true' : '')
    const list = ipAllowlist.value.trim()
    try {
      await save(KEYS.ipAllowlist, list)
    } catch (error) {
      if (!(error instanceof PlatformError && error.status === 409)) throw error
      const sure = await confirmDialog({
        title: 'Lock out your own address?',
        message: `${error.message}. You, and everyone of ${me.organizationName} at your address, will be refused from the next request.`,
        confirm: 'Save anyway',
        danger: true,
      })
      if (!sure) return
      await put(KEYS.ipAllowlist, list, true)
    }
    notify('Security policies saved.')
  })

  void guard(alert, async () => {
    const { items } = unwrap(
      await api.GET('/api/organizations/{orgId}/config', { params: { path: { orgId } } }),
    )
    const value = (key: string) => items.find((entry) => entry.key === key)?.value ?? ''
    mfaRequired.checked = value(KEYS.mfaRequired) === 'true'
    mfaGrace.value = value(KEYS.mfaGrace)
    sessionMaxAge.value = value(KEYS.sessionMaxAge)
    ipAllowlist.value = value(KEYS.ipAllowlist)
  })

  return screen(
    'Security policies',
    `Rules every member and API key of ${me.organizationName} is held to, on every instance from the next request.`,
    card({ title: 'Policies' }, alert, form),
  )
}
