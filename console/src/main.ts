import createClient from 'openapi-fetch'
import {
  createPlatformClient,
  type PlatformError,
  type SessionState,
  unwrap,
} from '../../client/src/index.ts'
import type { paths as ResourcePaths } from './resources.schema.ts'

// The demo console: every call goes through the typed client (client/), and the purchase requests
// and users through a client generated the same way for this app's own resources.

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T
const text = (value: unknown) => document.createTextNode(String(value ?? ''))
const row = (...cells: (string | Node)[]) => {
  const tr = document.createElement('tr')
  for (const cell of cells) {
    const td = document.createElement('td')
    td.append(typeof cell === 'string' ? text(cell) : cell)
    tr.append(td)
  }
  return tr
}
const button = (label: string, onClick: () => Promise<void>) => {
  const b = document.createElement('button')
  b.type = 'button'
  b.textContent = label
  b.addEventListener('click', () => guard(onClick))
  return b
}
const showError = (message: string) => {
  $('error').textContent = message
}
async function guard(task: () => Promise<void>) {
  showError('')
  try {
    await task()
  } catch (error) {
    const failure = error as PlatformError
    showError(failure.code ? `${failure.code}: ${failure.message}` : String(error))
  }
}
const form = (id: string) => new FormData($<HTMLFormElement>(id))

const platform = createPlatformClient({ onSessionChange: (state) => render(state) })
const resources = createClient<ResourcePaths>({ baseUrl: location.origin, fetch: platform.fetch })
const { api } = platform

let selected: string | undefined
let cursor: string | null = null

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
  if (signedIn) void guard(loadAll)
}

async function loadAll() {
  await Promise.all([loadSessions(), loadPurchaseRequests(true), loadAdmin()])
}

async function loadSessions() {
  const sessions = unwrap(await api.GET('/api/auth/sessions'))
  $('sessions').replaceChildren(
    ...sessions.map((s) =>
      row(
        `${s.userAgent ?? 'unknown device'}${s.current ? ' (this one)' : ''}`,
        s.ipAddress ?? '',
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
  const otpCode = String(data.get('otpCode') ?? '').trim()
  void guard(async () => {
    await platform.login({
      username: String(data.get('username')),
      password: String(data.get('password')),
      ...(otpCode ? { otpCode } : {}),
    })
  })
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
