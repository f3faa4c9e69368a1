import createClient from 'openapi-fetch'
import {
  createPlatformClient,
  isPasskeyCeremonyAborted,
  type PasskeyRecord,
  PlatformError,
  passkeysSupported,
  type SessionState,
  unwrap,
} from '../../client/src/index.ts'
import type { paths as ResourcePaths } from './resources.schema.ts'

// The demo console: every call goes through the typed client (client/), and the purchase requests
// and users through a client generated the same way for this app's own resources.

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T
const text = (value: unknown) => document.createTextNode(String(value ?? ''))
const row = (...cells: (string | Node | Node[])[]) => {
  const tr = document.createElement('tr')
  for (const cell of cells) {
    const td = document.createElement('td')
    td.append(...(typeof cell === 'string' ? [text(cell)] : Array.isArray(cell) ? cell : [cell]))
    tr.append(td)
  }
  return tr
}
/** Fills the body of a `table.stack`; on a narrow screen each cell shows its column's heading. */
const fillStacked = (tbody: HTMLElement, rows: HTMLTableRowElement[]) => {
  const headings = [...((tbody.parentElement as HTMLTableElement).tHead?.rows[0]?.cells ?? [])].map(
    (th) => th.textContent ?? '',
  )
  for (const tr of rows) for (const td of tr.cells) td.dataset.label = headings[td.cellIndex] ?? ''
  tbody.replaceChildren(...rows)
}
const button = (label: string, onClick: () => Promise<void>, errorsIn = 'error') => {
  const b = document.createElement('button')
  b.type = 'button'
  b.textContent = label
  b.addEventListener('click', () => guard(onClick, errorsIn))
  return b
}
const showError = (message: string, where = 'error') => {
  $(where).textContent = message
}
/** The catalogue's code (or the browser's, for a passkey ceremony) and the problem's detail. */
function describe(error: unknown): string {
  const failure = error as { code?: string; name?: string; message?: string }
  // The browser's own reason, when @simplewebauthn/browser passes it through unnamed.
  const code = failure.code === 'ERROR_PASSTHROUGH_SEE_CAUSE_PROPERTY' ? failure.name : failure.code
  return code ? `${code}: ${failure.message}` : String(error)
}
/** Runs `task`, showing its failure in the alert `where` (the page's, unless a section has one). */
async function guard(task: () => Promise<void>, where = 'error') {
  showError('', where)
  try {
    await task()
  } catch (error) {
    // A passkey ceremony ended by the next one the user started is no failure.
    if (!isPasskeyCeremonyAborted(error)) showError(describe(error), where)
  }
}
const form = (id: string) => new FormData($<HTMLFormElement>(id))

const platform = createPlatformClient({ onSessionChange: (state) => render(state) })
const resources = createClient<ResourcePaths>({ baseUrl: location.origin, fetch: platform.fetch })
const { api } = platform

let selected: string | undefined
let cursor: string | null = null
let autofillOffered = false

for (const element of document.querySelectorAll<HTMLElement>('.passkey-only'))
  element.hidden = !passkeysSupported()

function render(state: SessionState) {
  const signedIn = state.status === 'signed-in'
  $('signin').hidden = signedIn || state.status === 'unknown'
  $('app').hidden = !signedIn
  $('who').textContent =
    state.status === 'signed-in'
      ? `Signed in (user ${state.session.userId})`
      : state.status === 'signed-out'
        ? state.reason === 'reuse-detected'
          ? 'Signed out: this session was used elsewhere'
          : 'Signed out'
        : 'Restoring session…'
  if (signedIn) {
    // Nothing typed into the sign-in form stays in the page, the password least of all.
    $<HTMLFormElement>('login-form').reset()
    void guard(loadAll)
  }
  if (state.status === 'signed-out') void offerPasskeyAutofill()
}

/**
 * While the sign-in form shows, the email field's autofill offers this site's passkeys; picking one
 * signs in. Any other sign-in ends the offer (the client aborts the ceremony).
 */
async function offerPasskeyAutofill() {
  if (autofillOffered || platform.state.status !== 'signed-out' || !passkeysSupported()) return
  autofillOffered = true
  try {
    await platform.loginWithPasskey({ conditional: true })
  } catch (error) {
    // The browser's endings (no autofill, no passkey picked, aborted for another sign-in) are none
    // of the user's doing; the service's refusal of a picked passkey is shown.
    if (error instanceof PlatformError) showError(describe(error))
  } finally {
    autofillOffered = false
  }
}

async function loadAll() {
  await Promise.all([loadSessions(), loadPasskeys(), loadPurchaseRequests(true), loadAdmin()])
}

async function loadSessions() {
  const sessions = unwrap(await api.GET('/api/auth/sessions'))
  fillStacked(
    $('sessions'),
    sessions.map((s) =>
      row(
        `${s.userAgent ?? 'unknown device'}${s.current ? ' (this one)' : ''}`,
        s.ipAddress ?? '',
        s.signInMethod ?? '',
        new Date(s.lastUsedAt).toLocaleString(),
        s.current
          ? ''
          : button('Revoke', async () => {
              unwrap(
                await api.DELETE('/api/auth/sessions/{sessionId}', {
                  params: { path: { sessionId: s.sessionId } },
                }),
              )
              await loadSessions()
            }),
      ),
    ),
  )
}

const when = (iso: string | null) => (iso ? new Date(iso).toLocaleString() : 'never')

async function loadPasskeys() {
  const section = $('passkeys-section')
  if (section.hidden) return
  section.setAttribute('aria-busy', 'true')
  $('passkeys-status').textContent = 'Loading passkeys…'
  await guard(async () => {
    let items: PasskeyRecord[]
    try {
      items = await platform.passkeys.list()
    } catch (error) {
      $('passkeys').replaceChildren()
      $('passkeys-status').textContent = 'The passkeys could not be loaded.'
      throw error
    } finally {
      section.removeAttribute('aria-busy')
    }
    fillStacked($('passkeys'), items.map(passkeyRow))
    $('passkeys-status').textContent =
      items.length === 0
        ? 'No passkeys yet: add one to sign in without a password.'
        : `${items.length} passkey${items.length === 1 ? '' : 's'}`
  }, 'passkeys-error')
}

function passkeyRow(passkey: PasskeyRecord) {
  const rename = button('Rename', async () => renamePasskey(tr, passkey), 'passkeys-error')
  const remove = button(
    'Remove',
    async () => {
      // The list is shown afresh either way: a passkey removed elsewhere is gone from it too.
      try {
        await platform.passkeys.remove(passkey.id)
      } finally {
        await loadPasskeys()
      }
    },
    'passkeys-error',
  )
  // Told apart by the passkey's name, for a screen reader's list of buttons.
  rename.setAttribute('aria-label', `Rename ${passkey.name}`)
  remove.setAttribute('aria-label', `Remove ${passkey.name}`)
  const tr = row(passkey.name, when(passkey.createdAt), when(passkey.lastUsedAt), [rename, remove])
  tr.dataset.id = passkey.id
  return tr
}

/** The Rename button of a passkey's row, where the keyboard goes back to after its editor. */
const renameButtonOf = (id: string) =>
  document.querySelector<HTMLButtonElement>(`#passkeys tr[data-id="${CSS.escape(id)}"] button`)

/** Swaps the passkey's name for a small form; Escape or Cancel puts it back. */
function renamePasskey(tr: HTMLTableRowElement, passkey: PasskeyRecord) {
  const cell = tr.cells[0]
  if (!cell || cell.querySelector('form')) return
  const editor = document.createElement('form')
  editor.className = 'inline'
  const label = document.createElement('label')
  const input = document.createElement('input')
  input.name = 'name'
  input.required = true
  input.maxLength = 100
  input.value = passkey.name
  label.append(text(`New name for ${passkey.name} `), input)
  const save = document.createElement('button')
  save.type = 'submit'
  save.textContent = 'Save'
  const cancel = document.createElement('button')
  cancel.type = 'button'
  cancel.textContent = 'Cancel'
  const close = () => {
    cell.replaceChildren(text(passkey.name))
    renameButtonOf(passkey.id)?.focus()
  }
  cancel.addEventListener('click', close)
  editor.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') close()
  })
  editor.addEventListener('submit', (event) => {
    event.preventDefault()
    void guard(async () => {
      try {
        await platform.passkeys.rename(passkey.id, input.value.trim())
      } finally {
        await loadPasskeys()
        renameButtonOf(passkey.id)?.focus()
      }
    }, 'passkeys-error')
  })
  editor.append(label, save, cancel)
  cell.replaceChildren(editor)
  input.select()
}

async function loadPurchaseRequests(first: boolean) {
  if (first) cursor = null
  const page = unwrap(
    await resources.GET('/api/purchase-requests', { params: { query: cursor ? { cursor } : {} } }),
  )
  const rows = page.items.map((pr) => {
    const tr = row(
      pr.title,
      pr.status,
      button('Open', () => openPurchaseRequest(pr.id)),
    )
    tr.dataset.id = pr.id
    return tr
  })
  if (first) $('prs').replaceChildren(...rows)
  else $('prs').append(...rows)
  cursor = page.nextCursor
  $('pr-more').hidden = cursor === null
}

async function openPurchaseRequest(id: string) {
  selected = id
  const pr = unwrap(await resources.GET('/api/purchase-requests/{id}', { params: { path: { id } } }))
  const history = unwrap(
    await resources.GET('/api/purchase-requests/{id}/history', { params: { path: { id } } }),
  )
  $('pr-detail').hidden = false
  $('pr-detail-title').replaceChildren(text(`${pr.title} (${pr.status}) `))
  if (pr.status === 'DRAFT') $('pr-detail-title').append(button('Submit', () => transition(id, 'submit')))
  if (pr.status === 'SUBMITTED')
    $('pr-detail-title').append(button('Approve', () => transition(id, 'approve')))
  $('pr-history').replaceChildren(
    ...history.items.map((h) => {
      const li = document.createElement('li')
      li.textContent = `${h.action}: ${h.fromStatus} → ${h.toStatus} at ${new Date(h.occurredAt).toLocaleString()}`
      return li
    }),
  )
  await loadAttachments(id)
}

async function transition(id: string, action: 'submit' | 'approve') {
  const path =
    action === 'submit' ? '/api/purchase-requests/{id}/submit' : '/api/purchase-requests/{id}/approve'
  unwrap(await resources.POST(path, { params: { path: { id } } }))
  await Promise.all([openPurchaseRequest(id), loadPurchaseRequests(true)])
}

async function loadAttachments(id: string) {
  const files = unwrap(
    await api.GET('/api/storage/files', {
      params: { query: { resourceType: 'purchase_request', resourceId: id } },
    }),
  )
  $('attachments').replaceChildren(
    ...files.items.map((file) => {
      const li = document.createElement('li')
      li.append(
        text(`${file.fileName} (${file.sizeBytes} bytes) `),
        button('Download', async () => {
          const link = unwrap(
            await api.GET('/api/storage/files/{fileId}/download-url', {
              params: { path: { fileId: file.id } },
            }),
          )
          location.assign(link.downloadUrl)
        }),
      )
      return li
    }),
  )
}

async function loadAdmin() {
  const state = platform.state
  if (state.status !== 'signed-in') return
  const orgId = state.session.organizationId
  const check = unwrap(
    await api.POST('/api/authz/check', {
      body: { relation: 'admin', objectType: 'organization', objectId: orgId },
    }),
  )
  $('admin').hidden = !check.allowed
  if (!check.allowed) return
  const entries = unwrap(await api.GET('/api/organizations/{orgId}/config', { params: { path: { orgId } } }))
  $('config').replaceChildren(...entries.items.map((e) => row(e.key, e.value)))
}

$('login-form').addEventListener('submit', (event) => {
  event.preventDefault()
  const data = form('login-form')
  const username = String(data.get('username'))
  const otpCode = String(data.get('otpCode') ?? '').trim()
  // "Sign in with password and passkey": a passkey of the account in place of the one-time code.
  const withPasskey = (event as SubmitEvent).submitter?.getAttribute('value') === 'passkey'
  void guard(async () => {
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
      if (withPasskey) void offerPasskeyAutofill()
    }
  })
})
$('passkey-login').addEventListener('click', () =>
  guard(async () => {
    const username = String(form('login-form').get('username') ?? '').trim()
    try {
      await platform.loginWithPasskey(username ? { username } : {})
    } finally {
      void offerPasskeyAutofill()
    }
  }),
)
$('passkey-add-form').addEventListener('submit', (event) => {
  event.preventDefault()
  const add = $<HTMLFormElement>('passkey-add-form')
  const submit = add.querySelector('button') as HTMLButtonElement
  void guard(async () => {
    submit.disabled = true
    $('passkeys-status').textContent = 'Waiting for the authenticator…'
    try {
      await platform.passkeys.register(String(form('passkey-add-form').get('name') ?? ''))
      add.reset()
    } finally {
      submit.disabled = false
      await loadPasskeys()
    }
  }, 'passkeys-error')
})
$('logout').addEventListener('click', () => guard(() => platform.logout()))
$('logout-all').addEventListener('click', () =>
  guard(async () => {
    unwrap(await api.POST('/api/auth/logout-all'))
    await platform.logout()
  }),
)
$('otp-setup').addEventListener('click', () =>
  guard(async () => {
    const setup = unwrap(await api.POST('/api/auth/otp/setup'))
    // The SVG comes from the service itself, and holds only the QR code's paths.
    $('otp-qr').innerHTML = setup.qrCodeSvg
    $('otp-secret').textContent = `Secret: ${setup.secret}`
    $('otp-enable-form').hidden = false
  }),
)
$('otp-enable-form').addEventListener('submit', (event) => {
  event.preventDefault()
  void guard(async () => {
    const { backupCodes } = unwrap(
      await api.POST('/api/auth/otp/enable', { body: { code: String(form('otp-enable-form').get('code')) } }),
    )
    $('backup-codes').textContent = `Backup codes (shown once): ${backupCodes.join(' ')}`
    $('otp-enable-form').hidden = true
    $('otp-qr').replaceChildren()
  })
})
$('otp-disable').addEventListener('click', () =>
  guard(async () => {
    unwrap(await api.POST('/api/auth/otp/disable'))
    $('backup-codes').textContent = 'Two-factor authentication is off'
  }),
)
$('pr-create').addEventListener('submit', (event) => {
  event.preventDefault()
  void guard(async () => {
    const created = unwrap(
      await resources.POST('/api/purchase-requests', {
        body: { title: String(form('pr-create').get('title')) },
      }),
    )
    $<HTMLFormElement>('pr-create').reset()
    await loadPurchaseRequests(true)
    await openPurchaseRequest(created.id)
  })
})
$('pr-more').addEventListener('click', () => guard(() => loadPurchaseRequests(false)))
$('attach').addEventListener('change', () =>
  guard(async () => {
    const input = $<HTMLInputElement>('attach')
    const file = input.files?.[0]
    if (!file || !selected) return
    const progress = $<HTMLProgressElement>('upload-progress')
    progress.hidden = false
    progress.value = 0
    await platform.upload({
      resourceType: 'purchase_request',
      resourceId: selected,
      file,
      fileName: file.name,
      onProgress: (sent, total) => {
        progress.value = total > 0 ? Math.round((sent / total) * 100) : 0
      },
    })
    input.value = ''
    await loadAttachments(selected)
  }),
)
$('pr-report').addEventListener('click', () =>
  guard(async () => {
    if (!selected) return
    unwrap(await resources.POST('/api/purchase-requests/{id}/report', { params: { path: { id: selected } } }))
    await loadAttachments(selected)
  }),
)
$('config-form').addEventListener('submit', (event) => {
  event.preventDefault()
  void guard(async () => {
    const state = platform.state
    if (state.status !== 'signed-in') return
    const data = form('config-form')
    unwrap(
      await api.PUT('/api/organizations/{orgId}/config/{key}', {
        params: { path: { orgId: state.session.organizationId, key: String(data.get('key')) } },
        body: { value: String(data.get('value')) },
      }),
    )
    await loadAdmin()
  })
})
$('invite-form').addEventListener('submit', (event) => {
  event.preventDefault()
  void guard(async () => {
    const state = platform.state
    if (state.status !== 'signed-in') return
    const data = form('invite-form')
    const invited = unwrap(
      await resources.POST('/api/users', {
        body: {
          email: String(data.get('email')),
          organizationId: state.session.organizationId,
          role: data.get('role') === 'admin' ? 'admin' : 'member',
        },
      }),
    )
    $('admin-result').textContent = `Invited: ${invited.userId}`
  })
})
$('user-state-form').addEventListener('submit', (event) => {
  event.preventDefault()
  const submitter = (event as SubmitEvent).submitter as HTMLButtonElement | null
  void guard(async () => {
    const id = String(form('user-state-form').get('userId'))
    const path =
      submitter?.value === 'reactivate' ? '/api/users/{id}/reactivate' : '/api/users/{id}/deactivate'
    const result = unwrap(await resources.POST(path, { params: { path: { id } } }))
    $('admin-result').textContent = `${result.userId}: ${result.active ? 'active' : 'deactivated'}`
  })
})

// For the browser's developer tools (and the browser tests): the two clients this page uses.
Object.assign(globalThis, { platformConsole: { platform, resources } })

void guard(async () => {
  await platform.restoreSession()
})
