import { type PasskeyRecord, passkeysSupported, type Schemas, unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import {
  alertBox,
  badge,
  button,
  card,
  confirmDialog,
  copyText,
  field,
  fieldText,
  fill,
  guard,
  h,
  notify,
  onSubmit,
  screen,
  shortId,
  time,
  uid,
} from '../dom.ts'
import { pagedList } from '../list.ts'
import { deviceName } from '../user-agent.ts'

// My account: who I am, my password, two-factor, passkeys, linked identities and sessions.

type Session = Schemas['SessionItem']

const METHODS: Record<NonNullable<Session['signInMethod']>, string> = {
  password: 'Password',
  'password+otp': 'Password and one-time code',
  'password+passkey': 'Password and passkey',
  passkey: 'Passkey',
  email_link: 'Emailed link',
  'email_link+otp': 'Emailed link and one-time code',
  'email_link+passkey': 'Emailed link and passkey',
  email_code: 'Emailed code',
  'email_code+otp': 'Emailed code and one-time code',
  'email_code+passkey': 'Emailed code and passkey',
  oidc: 'Identity provider',
  'oidc+otp': 'Identity provider and one-time code',
  'oidc+passkey': 'Identity provider and passkey',
}

export function accountScreen(context: ConsoleContext): HTMLElement {
  const { me } = context
  const sessions = sessionsCard(context)
  return screen(
    'My account',
    'How you sign in, and where you are signed in.',
    card(
      { title: 'Profile' },
      h(
        'dl',
        { class: 'facts' },
        h('div', null, h('dt', null, 'Email'), h('dd', null, me.email)),
        h('div', null, h('dt', null, 'Organization'), h('dd', null, me.organizationName)),
        h(
          'div',
          null,
          h('dt', null, 'Role'),
          h('dd', null, me.role === 'admin' ? 'Admin: manages the organization' : 'Member'),
        ),
        h('div', null, h('dt', null, 'User id'), h('dd', null, shortId(me.userId))),
      ),
    ),
    sessions.card,
    twoFactorCard(context),
    passkeysSupported() ? passkeysCard(context) : null,
    identitiesCard(context),
    emailCard(context),
    passwordCard(context, () => sessions.list.reload()),
  )
}

/**
 * The address change: the new address and the current password; then the code mailed to the new
 * address (its link opens the console's /verify-email page, which does the same).
 */
function emailCard(context: ConsoleContext) {
  const { api } = context
  const alert = alertBox('email-error')
  const body = h('div', { id: 'email-change' })

  function showAsk() {
    const form = h(
      'form',
      { id: 'email-form', class: 'narrow-form' },
      field(
        'New email address',
        h('input', {
          name: 'newEmail',
          type: 'email',
          autocomplete: 'email',
          required: true,
          maxlength: 320,
        }),
      ),
      // Not labelled "Current password": the password card's field is, and one label is one field.
      field(
        'Password',
        h('input', {
          name: 'currentPassword',
          type: 'password',
          autocomplete: 'current-password',
          required: true,
        }),
        'Your current one: it shows the change is yours.',
      ),
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'submit', class: 'btn primary' }, 'Send a code to the new address'),
      ),
    )
    onSubmit(form, alert, async () => {
      const newEmail = fieldText(form, 'newEmail')
      const currentPassword = String(new FormData(form).get('currentPassword') ?? '')
      unwrap(await api.POST('/api/account/email', { body: { newEmail, currentPassword } }))
      showCode(newEmail)
    })
    fill(body, form)
  }

  function showCode(newEmail: string) {
    const code = h('input', {
      name: 'code',
      inputmode: 'numeric',
      autocomplete: 'one-time-code',
      required: true,
      pattern: '[0-9]{6}',
      maxlength: 6,
      title: 'The six digits of the email',
    })
    const form = h(
      'form',
      { id: 'email-code-form', class: 'inline-form' },
      field('Code from the email', code),
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'submit', class: 'btn primary' }, 'Confirm the new address'),
        button('Cancel', () => showAsk()),
      ),
    )
    onSubmit(form, alert, async () => {
      unwrap(
        await api.POST('/api/account/email/verify', {
          body: { email: newEmail, code: fieldText(form, 'code') },
        }),
      )
      await context.refreshMe()
      notify('Email address changed.')
      // The profile shows the new address, and the sessions list the ones that were signed out.
      context.navigate('#/account')
    })
    fill(
      body,
      h(
        'p',
        { id: 'email-sent' },
        'If ',
        h('strong', null, newEmail),
        ' can be used, a six-digit code and a link are on their way to it. Enter the code here, or open the link. Until then you keep signing in as ',
        h('strong', null, context.me.email),
        '.',
      ),
      form,
    )
    code.focus()
  }

  showAsk()
  return card(
    {
      title: 'Email address',
      id: 'email-section',
      description:
        'You sign in with it and mails go to it. A change is made once the new address is confirmed; your other sessions are then signed out.',
    },
    alert,
    body,
  )
}

function sessionsCard(context: ConsoleContext) {
  const { api, platform } = context
  const alert = alertBox('sessions-error')
  const list = pagedList<Session>({
    caption: 'Your sessions',
    tbodyId: 'sessions',
    alert,
    loading: 'Loading your sessions…',
    empty: 'No active session.',
    failed: 'The sessions could not be loaded.',
    count: (n) => (n === 1 ? 'Signed in on this device only.' : `Signed in on ${n} devices.`),
    load: async () => ({ items: unwrap(await api.GET('/api/auth/sessions')), nextCursor: null }),
    columns: [
      {
        label: 'Device',
        cell: (s) => [
          h('span', { title: s.userAgent ?? undefined }, deviceName(s.userAgent)),
          s.current ? [' ', badge('This device', 'info')] : null,
        ],
      },
      { label: 'IP address', cell: (s) => s.ipAddress ?? 'unknown' },
      { label: 'Signed in with', cell: (s) => (s.signInMethod ? METHODS[s.signInMethod] : 'not recorded') },
      { label: 'Signed in', cell: (s) => time(s.createdAt) },
      { label: 'Last used', cell: (s) => time(s.lastUsedAt) },
      {
        label: 'Actions',
        actions: true,
        cell: (s) =>
          s.current
            ? null
            : button(
                'Revoke',
                () =>
                  void guard(alert, async () => {
                    unwrap(
                      await api.DELETE('/api/auth/sessions/{sessionId}', {
                        params: { path: { sessionId: s.sessionId } },
                      }),
                    )
                    notify(`Signed out ${deviceName(s.userAgent)}.`)
                    await list.reload()
                  }),
                { small: true, label: `Revoke the session of ${deviceName(s.userAgent)}` },
              ),
      },
    ],
  })
  void list.reload()
  const everywhere = button(
    'Sign out everywhere',
    () =>
      void guard(alert, async () => {
        const sure = await confirmDialog({
          title: 'Sign out everywhere?',
          message: 'Every session of your account ends, this one included. You sign in again afterwards.',
          confirm: 'Sign out everywhere',
          danger: true,
        })
        if (!sure) return
        unwrap(await api.POST('/api/auth/logout-all'))
        await platform.logout()
      }),
    { variant: 'danger' },
  )
  return {
    list,
    card: card(
      {
        title: 'Sessions',
        id: 'sessions-section',
        actions: everywhere,
        description: 'Where your account is signed in. Revoke a session you do not recognise.',
      },
      alert,
      list.element,
    ),
  }
}

function twoFactorCard(context: ConsoleContext) {
  const { api } = context
  const alert = alertBox('otp-error')
  const body = h('div', { id: 'otp' })
  const state = h('span', { class: 'card-state' })

  function showOff() {
    fill(state, badge('Off', 'neutral'))
    fill(
      body,
      h(
        'p',
        null,
        'Sign-ins ask for your password only. Add a code from an authenticator app as a second step.',
      ),
      button('Set up', () => void guard(alert, setUp), { variant: 'primary' }),
    )
  }

  function showOn() {
    fill(state, badge('On', 'good'))
    fill(
      body,
      h('p', null, 'Sign-ins ask for a code from your authenticator app, or one of your backup codes.'),
      // A role that requires the second factor cannot turn it off: no button that can only fail.
      context.me.otpRequired
        ? h(
            'p',
            { class: 'hint', id: 'otp-required' },
            'Your role requires two-factor authentication, so it stays on.',
          )
        : button(
            'Turn off',
            () =>
              void guard(alert, async () => {
                const sure = await confirmDialog({
                  title: 'Turn off two-factor authentication?',
                  message: 'Sign-ins will ask for your password only, and your backup codes stop working.',
                  confirm: 'Turn off',
                  danger: true,
                })
                if (!sure) return
                unwrap(await api.POST('/api/auth/otp/disable'))
                await context.refreshMe()
                notify('Two-factor authentication is off.')
                showOff()
              }),
            { variant: 'danger' },
          ),
    )
  }

  async function setUp() {
    const setup = unwrap(await api.POST('/api/auth/otp/setup'))
    const svg = qrCode(setup.qrCodeSvg)
    svg?.setAttribute('role', 'img')
    svg?.setAttribute('aria-label', 'QR code of the secret, for the authenticator app')
    const qr = h(
      'div',
      { id: 'otp-qr', class: 'qr' },
      svg ?? h('p', { class: 'hint' }, 'The QR code could not be shown: type the secret into the app.'),
    )
    const code = h('input', {
      name: 'code',
      inputmode: 'numeric',
      autocomplete: 'one-time-code',
      required: true,
      pattern: '[0-9 ]{6,8}',
    })
    const form = h(
      'form',
      { id: 'otp-enable-form', class: 'inline-form' },
      field('Code from the app', code),
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'submit', class: 'btn primary' }, 'Turn on'),
        button('Cancel', () => showOff()),
      ),
    )
    onSubmit(form, alert, async () => {
      const { backupCodes } = unwrap(
        await api.POST('/api/auth/otp/enable', {
          body: { code: fieldText(form, 'code').replaceAll(' ', '') },
        }),
      )
      await context.refreshMe()
      showBackupCodes(backupCodes)
    })
    fill(
      body,
      h(
        'ol',
        { class: 'steps' },
        h(
          'li',
          null,
          h('p', null, 'Scan this code with an authenticator app (1Password, Google Authenticator, Aegis…).'),
          qr,
          h('p', { class: 'hint' }, 'Or type the secret into the app: '),
          h('p', { id: 'otp-secret', class: 'codes' }, 'Secret: ', h('code', null, setup.secret)),
        ),
        h('li', null, h('p', null, 'Type the code the app shows.'), form),
      ),
    )
    code.focus()
  }

  function showBackupCodes(codes: string[]) {
    fill(state, badge('On', 'good'))
    const copied = h('p', { class: 'hint', role: 'status' })
    const done = button('I have saved them', () => showOn(), { variant: 'primary' })
    fill(
      body,
      h(
        'div',
        { id: 'backup-codes', class: 'callout' },
        h('h3', null, 'Backup codes (shown once)'),
        h(
          'p',
          null,
          'Each code signs you in once when your authenticator app is not at hand. Keep them somewhere safe: they are not shown again.',
        ),
        h(
          'ul',
          { class: 'code-grid' },
          codes.map((c) => h('li', null, h('code', null, c))),
        ),
        h(
          'div',
          { class: 'actions' },
          button('Copy the codes', () => void copyText(codes.join('\n'), copied)),
          done,
        ),
        copied,
      ),
    )
    notify('Two-factor authentication is on.')
    done.focus()
  }

  if (context.me.otpEnabled) showOn()
  else showOff()
  return card(
    {
      title: 'Two-factor authentication',
      id: 'otp-section',
      actions: state,
      description: null,
    },
    alert,
    body,
  )
}

const SVG = 'http://www.w3.org/2000/svg'

/** What a QR code is drawn with: these elements, with these attributes. */
const QR_SHAPES: Record<string, readonly string[]> = {
  svg: ['viewBox', 'width', 'height', 'shape-rendering'],
  path: ['d', 'fill', 'stroke', 'stroke-width'],
  rect: ['x', 'y', 'width', 'height', 'fill'],
}
/** Numbers, path commands, colours and keywords: no `url(…)`, no scheme, no markup. */
const QR_VALUE = /^[#\w\s.,-]*$/

/**
 * The QR code of the one-time-password setup answer, drawn anew: the answer's text is parsed as an
 * inert XML document (nothing in it runs or loads), and only its shapes, with their geometry and
 * colours, are copied into new SVG elements of the page; anything else in it is left out. Null when
 * the text is no well-formed SVG.
 */
function qrCode(markup: string): SVGElement | null {
  const parsed = new DOMParser().parseFromString(markup, 'image/svg+xml')
  const root = parsed.documentElement
  // Text that is not well-formed XML parses to an error report, and what came before the error.
  if (parsed.getElementsByTagName('parsererror').length > 0) return null
  return root.namespaceURI === SVG && root.localName === 'svg' ? copyShape(root) : null
}

function copyShape(source: Element): SVGElement | null {
  const attributes = source.namespaceURI === SVG ? QR_SHAPES[source.localName] : undefined
  if (!attributes) return null
  const shape = document.createElementNS(SVG, source.localName)
  for (const name of attributes) {
    const value = source.getAttribute(name)
    if (value !== null && QR_VALUE.test(value)) shape.setAttribute(name, value)
  }
  for (const child of source.children) {
    const copied = copyShape(child)
    if (copied) shape.append(copied)
  }
  return shape
}

function passkeysCard(context: ConsoleContext) {
  const { platform } = context
  const alert = alertBox('passkeys-error')
  const section = card(
    {
      title: 'Passkeys',
      id: 'passkeys-section',
      description: 'Sign in with your fingerprint, face or device PIN instead of a password.',
    },
    alert,
  )

  const list = pagedList<PasskeyRecord>({
    caption: 'Your passkeys',
    tbodyId: 'passkeys',
    statusId: 'passkeys-status',
    alert,
    busyOn: section,
    loading: 'Loading passkeys…',
    empty: 'No passkeys yet: add one to sign in without a password.',
    failed: 'The passkeys could not be loaded.',
    count: (n) => `${n} passkey${n === 1 ? '' : 's'}`,
    load: async () => ({ items: await platform.passkeys.list(), nextCursor: null }),
    row: (passkey, tr) => {
      tr.dataset.id = passkey.id
    },
    columns: [
      { label: 'Name', cell: (p) => p.name },
      { label: 'Kind', cell: (p) => (p.deviceType === 'multiDevice' ? 'Synced' : 'This authenticator only') },
      { label: 'Added', cell: (p) => time(p.createdAt) },
      { label: 'Last used', cell: (p) => time(p.lastUsedAt) },
      {
        label: 'Actions',
        actions: true,
        cell: (p) =>
          h(
            'div',
            { class: 'row-actions' },
            button('Rename', (event) => rename(event.currentTarget as HTMLElement, p), {
              small: true,
              label: `Rename ${p.name}`,
            }),
            button(
              'Remove',
              () =>
                void guard(alert, async () => {
                  const sure = await confirmDialog({
                    title: `Remove the passkey “${p.name}”?`,
                    message:
                      'It can no longer sign in to your account. The authenticator may keep a copy you can delete there.',
                    confirm: 'Remove',
                    danger: true,
                  })
                  if (!sure) return
                  // The list is shown afresh either way: a passkey removed elsewhere is gone from it too.
                  try {
                    await platform.passkeys.remove(p.id)
                    notify(`Passkey “${p.name}” removed.`)
                  } finally {
                    await list.reload()
                  }
                }),
              { small: true, variant: 'danger', label: `Remove ${p.name}` },
            ),
          ),
      },
    ],
  })

  /** The Rename button of a passkey's row, where the keyboard goes back to after its editor. */
  const renameButtonOf = (id: string) =>
    section.querySelector<HTMLButtonElement>(`#passkeys tr[data-id="${CSS.escape(id)}"] button`)

  /** Swaps the passkey's name for a small form; Escape or Cancel puts it back. */
  function rename(from: HTMLElement, passkey: PasskeyRecord) {
    const cell = from.closest('tr')?.cells[0]
    if (!cell || cell.querySelector('form')) return
    const input = h('input', { name: 'name', required: true, maxlength: 100, value: passkey.name })
    const close = () => {
      cell.replaceChildren(passkey.name)
      renameButtonOf(passkey.id)?.focus()
    }
    const editor = h(
      'form',
      {
        class: 'inline',
        onkeydown: (event: KeyboardEvent) => {
          if (event.key === 'Escape') close()
        },
      },
      h('label', null, `New name for ${passkey.name} `, input),
      h('button', { type: 'submit', class: 'btn primary small' }, 'Save'),
      button('Cancel', close, { small: true }),
    )
    editor.addEventListener('submit', (event) => {
      event.preventDefault()
      void guard(alert, async () => {
        try {
          await platform.passkeys.rename(passkey.id, input.value.trim())
        } finally {
          await list.reload()
          renameButtonOf(passkey.id)?.focus()
        }
      })
    })
    cell.replaceChildren(editor)
    input.select()
  }

  const nameId = uid('passkey-name')
  const add = h(
    'form',
    { id: 'passkey-add-form', class: 'inline-form' },
    h(
      'div',
      { class: 'field' },
      h('label', { for: nameId }, 'Name of the new passkey ', h('span', { class: 'optional' }, '(optional)')),
      h('input', {
        id: nameId,
        name: 'name',
        maxlength: 100,
        autocomplete: 'off',
        placeholder: 'Work laptop',
      }),
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Add a passkey')),
  )
  add.addEventListener('submit', (event) => {
    event.preventDefault()
    const submit = add.querySelector('button') as HTMLButtonElement
    void guard(alert, async () => {
      submit.disabled = true
      const status = section.querySelector('#passkeys-status')
      if (status) status.textContent = 'Waiting for the authenticator…'
      try {
        await platform.passkeys.register(fieldText(add, 'name'))
        add.reset()
        notify('Passkey added.')
      } finally {
        submit.disabled = false
        await list.reload()
      }
    })
  })
  section.append(list.element, add)
  void list.reload()
  return section
}

/** The password change; `changed` runs after it (the service ends the user's other sessions). */
function passwordCard(context: ConsoleContext, changed: () => Promise<void>) {
  const { api } = context
  const alert = alertBox('password-error')
  const done = h('p', { class: 'success', role: 'status' })
  const current = h('input', {
    name: 'currentPassword',
    type: 'password',
    autocomplete: 'current-password',
    required: true,
  })
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
  // The browser says why before anything is sent: the two new passwords differ.
  const match = () =>
    repeat.setCustomValidity(repeat.value === next.value ? '' : 'The two new passwords differ')
  next.addEventListener('input', match)
  repeat.addEventListener('input', match)
  const form = h(
    'form',
    { id: 'password-form', class: 'narrow-form' },
    field('Current password', current),
    field('New password', next, 'At least 12 characters, unless your organization was set up otherwise.'),
    field('Repeat the new password', repeat),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Change password')),
  )
  onSubmit(form, alert, async () => {
    done.textContent = ''
    unwrap(
      await api.POST('/api/auth/password/change', {
        body: { currentPassword: current.value, newPassword: next.value },
      }),
    )
    form.reset()
    done.textContent = 'Your password was changed. Your other sessions were signed out.'
    notify('Password changed.')
    await changed()
  })
  return card({ title: 'Password', id: 'password-section' }, alert, form, done)
}

type LinkedIdentity = Schemas['LinkedIdentity']

/**
 * The identities at OpenID Connect providers linked to the account: each signs it in. Linking one
 * goes to the provider and back (within five minutes of signing in); unlinking keeps at least one
 * way to sign in (the service answers 409 otherwise).
 */
function identitiesCard(context: ConsoleContext) {
  const { platform } = context
  const alert = alertBox('identities-error')
  const links = h('div', { class: 'row-actions', id: 'identity-links' })
  const section = card(
    {
      title: 'Linked identities',
      id: 'identities-section',
      description:
        'Accounts at other providers that sign you in here. Linking one needs a sign-in within the last five minutes.',
    },
    alert,
    links,
  )
  const list = pagedList<LinkedIdentity>({
    caption: 'Your linked identities',
    tbodyId: 'identities',
    statusId: 'identities-status',
    alert,
    busyOn: section,
    loading: 'Loading linked identities…',
    empty: 'No identity linked.',
    failed: 'The linked identities could not be loaded.',
    count: (n) => `${n} linked identit${n === 1 ? 'y' : 'ies'}`,
    load: async () => ({
      items: unwrap(await platform.api.GET('/api/account/identities')).items,
      nextCursor: null,
    }),
    row: (identity, tr) => {
      tr.dataset.id = identity.id
    },
    columns: [
      { label: 'Provider', cell: (i) => i.providerName ?? i.provider },
      { label: 'Email', cell: (i) => i.email ?? '' },
      { label: 'Linked', cell: (i) => time(i.createdAt) },
      { label: 'Last used', cell: (i) => time(i.lastUsedAt) },
      {
        label: 'Actions',
        actions: true,
        cell: (i) =>
          button(
            'Unlink',
            () =>
              void guard(alert, async () => {
                const sure = await confirmDialog({
                  title: `Unlink ${i.providerName ?? i.provider}?`,
                  message: 'It can no longer sign in to your account.',
                  confirm: 'Unlink',
                  danger: true,
                })
                if (!sure) return
                try {
                  unwrap(
                    await platform.api.DELETE('/api/account/identities/{identityId}', {
                      params: { path: { identityId: i.id } },
                    }),
                  )
                  notify('Identity unlinked.')
                } finally {
                  await list.reload()
                }
              }),
            { small: true, variant: 'danger', label: `Unlink ${i.providerName ?? i.provider}` },
          ),
      },
    ],
  })
  section.append(list.element)
  void list.reload()
  void guard(alert, async () => {
    const { items } = unwrap(await platform.api.GET('/api/auth/oidc/providers'))
    fill(
      links,
      ...items.map((provider) =>
        button(
          `Link ${provider.name}`,
          () =>
            void guard(alert, async () => {
              const { redirectUrl } = unwrap(
                await platform.api.POST('/api/account/identities/link', { body: { provider: provider.id } }),
              )
              location.assign(redirectUrl)
            }),
          { small: true },
        ),
      ),
    )
  })
  return section
}
