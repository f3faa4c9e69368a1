import { type FileRecord, unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext, ResourceSchemas } from '../context.ts'
import {
  alertBox,
  badge,
  button,
  bytes,
  card,
  field,
  fieldText,
  fill,
  guard,
  h,
  humanize,
  notify,
  onSubmit,
  screen,
  select,
  shortId,
  type Tone,
  time,
  uid,
} from '../dom.ts'
import { pagedList } from '../list.ts'

// The example resource: purchase requests, paged and filtered by status; one request with its
// workflow actions, attachments (uploaded by the browser straight to the object store, with
// progress) and history, and its PDF report.

type PurchaseRequest = ResourceSchemas['PurchaseRequest']
type Status = PurchaseRequest['status']

const TONES: Record<Status, Tone> = { DRAFT: 'neutral', SUBMITTED: 'warn', APPROVED: 'good' }
export const statusBadge = (status: Status, id?: string) => {
  const element = badge(humanize(status), TONES[status])
  if (id) element.id = id
  return element
}

interface Step {
  action: 'submit' | 'approve'
  from: Status
  label: string
  done: string
  /** Whether the service lets the signed-in user take the step, from what it answered. */
  allowed: (pr: PurchaseRequest, context: ConsoleContext, may: Permissions) => boolean
}

/** What the service answered about the signed-in user and one request. */
interface Permissions {
  /** `can_edit` on the request, from POST /api/authz/check. */
  canEdit: boolean
}

/**
 * The workflow of src/features/purchase-requests/workflow.ts: the step each status offers. Who may
 * take it is the service's answer, not the console's guess from the user's role: submit is the
 * creator's or needs `can_edit`, approve needs `can_edit`, both asked of the permission check. A
 * refusal the service gives anyway (403, or 409 when the request moved meanwhile) is shown as its
 * problem, and the request shown afresh.
 */
const STEPS = [
  {
    action: 'submit',
    from: 'DRAFT',
    label: 'Submit for approval',
    done: 'submitted',
    allowed: (pr: PurchaseRequest, context: ConsoleContext, may: Permissions) =>
      pr.createdBy === context.me.userId || may.canEdit,
  },
  {
    action: 'approve',
    from: 'SUBMITTED',
    label: 'Approve',
    done: 'approved',
    allowed: (_pr: PurchaseRequest, _context: ConsoleContext, may: Permissions) => may.canEdit,
  },
] as const satisfies readonly Step[]

/** Asks the service what the signed-in user may do with the request. */
async function permissionsOn(context: ConsoleContext, id: string): Promise<Permissions> {
  const answer = unwrap(
    await context.api.POST('/api/authz/check', {
      body: { relation: 'can_edit', objectType: 'purchase_request', objectId: id },
    }),
  )
  return { canEdit: answer.allowed }
}

const DONE: Record<string, string> = { submit: 'Submitted', approve: 'Approved' }

const byWhom = (context: ConsoleContext, principalId: string) =>
  principalId === context.me.userId ? 'you' : shortId(principalId)

export function purchaseRequestsScreen(context: ConsoleContext): HTMLElement {
  const { resources } = context
  const alert = alertBox('error-prs')
  let status: Status | '' = ''

  const list = pagedList<PurchaseRequest>({
    caption: 'Purchase requests',
    tbodyId: 'prs',
    loading: 'Loading purchase requests…',
    empty: 'No purchase requests here yet.',
    failed: 'The purchase requests could not be loaded.',
    count: (n, more) => `${n}${more ? '+' : ''} purchase request${n === 1 ? '' : 's'}`,
    load: async (cursor) =>
      unwrap(
        await resources.GET('/api/purchase-requests', {
          params: { query: { ...(cursor ? { cursor } : {}), ...(status ? { status } : {}) } },
        }),
      ),
    row: (pr, tr) => {
      tr.dataset.id = pr.id
    },
    columns: [
      { label: 'Title', cell: (pr) => h('a', { href: `#/purchase-requests/${pr.id}` }, pr.title) },
      { label: 'Status', cell: (pr) => statusBadge(pr.status) },
      { label: 'Created by', cell: (pr) => byWhom(context, pr.createdBy) },
      { label: 'Created', cell: (pr) => time(pr.createdAt) },
      { label: 'Updated', cell: (pr) => time(pr.updatedAt) },
    ],
  })

  const filter = select(
    'status',
    [
      ['', 'All statuses'],
      ['DRAFT', 'Draft'],
      ['SUBMITTED', 'Submitted'],
      ['APPROVED', 'Approved'],
    ],
    '',
  )
  filter.id = 'pr-filter'
  filter.addEventListener('change', () => {
    status = filter.value as Status | ''
    void list.reload()
  })

  const titleId = uid('pr-title')
  const create = h(
    'form',
    { id: 'pr-create', class: 'inline-form' },
    h(
      'div',
      { class: 'field grow' },
      h('label', { for: titleId }, 'Title'),
      h('input', { id: titleId, name: 'title', required: true, maxlength: 255, autocomplete: 'off' }),
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Create')),
  )
  onSubmit(create, alert, async () => {
    const created = unwrap(
      await resources.POST('/api/purchase-requests', { body: { title: fieldText(create, 'title') } }),
    )
    notify(`Purchase request “${created.title}” created as a draft.`)
    context.navigate(`#/purchase-requests/${created.id}`)
  })

  void list.reload()
  return screen(
    'Purchase requests',
    'The example resource: a draft is submitted, then approved by an admin.',
    card(
      { title: 'New purchase request', description: 'It starts as a draft you can attach files to.' },
      alert,
      create,
    ),
    card(
      {
        title: 'All requests',
        actions: h('div', { class: 'field inline-field' }, h('label', { for: filter.id }, 'Status'), filter),
      },
      list.element,
    ),
  )
}

export function purchaseRequestScreen(context: ConsoleContext, [id = '']: string[]): HTMLElement {
  const { resources, api } = context
  const alert = alertBox('error-pr')
  const title = h('h1', { id: 'pr-detail-title', tabindex: '-1' }, 'Purchase request')
  const status = h('span', { class: 'title-status' })
  const facts = h('dl', { class: 'facts' })
  const actions = h('div', { class: 'actions', id: 'pr-actions' })
  const next = h('p', { class: 'hint' })
  const history = h('ol', { id: 'pr-history', class: 'timeline' })
  const attachments = h('ul', { id: 'attachments', class: 'files' })
  const attachmentsStatus = h('p', { class: 'list-status', 'aria-live': 'polite' }, 'Loading attachments…')
  const uploadStatus = h('span', { class: 'hint', 'aria-live': 'polite' })
  const progress = h('progress', {
    id: 'upload-progress',
    max: 100,
    value: 0,
    hidden: true,
    'aria-label': 'Upload',
  })
  const body = h('div', { class: 'detail', 'aria-busy': 'true' })
  const reportButton = button('Create PDF report', () => void guard(alert, report))
  reportButton.id = 'pr-report'
  // Filled once the service has said whether the user may attach files (`can_edit`).
  const attachmentsHint = h('span')
  const uploadSlot = h('div')

  async function load() {
    const [pr, events, may] = await Promise.all([
      resources.GET('/api/purchase-requests/{id}', { params: { path: { id } } }).then(unwrap),
      resources.GET('/api/purchase-requests/{id}/history', { params: { path: { id } } }).then(unwrap),
      permissionsOn(context, id),
    ])
    title.textContent = pr.title
    document.title = `${pr.title} · Platform core console`
    fill(status, statusBadge(pr.status, 'pr-status'))
    fill(
      facts,
      h(
        'div',
        null,
        h('dt', null, 'Created'),
        h('dd', null, time(pr.createdAt), ' by ', byWhom(context, pr.createdBy)),
      ),
      h('div', null, h('dt', null, 'Last change'), h('dd', null, time(pr.updatedAt))),
      h('div', null, h('dt', null, 'Id'), h('dd', null, shortId(pr.id))),
    )
    const steps = STEPS.filter((step) => step.from === pr.status && step.allowed(pr, context, may))
    fill(
      next,
      steps.length > 0
        ? null
        : pr.status === 'APPROVED'
          ? 'Approved: the workflow is complete.'
          : pr.status === 'SUBMITTED'
            ? 'Waiting for approval, which you may not give.'
            : 'Its creator, or someone who may edit it, submits it.',
    )
    fill(
      actions,
      steps.map((step) =>
        button(step.label, () => void guard(alert, () => move(step.action, step.done)), {
          variant: 'primary',
        }),
      ),
      reportButton,
    )
    // Uploading needs `can_edit` on the request too.
    fill(
      attachmentsHint,
      may.canEdit
        ? 'Files go from your browser straight to the object store.'
        : 'You may not attach files to this request; you can download them.',
    )
    fill(uploadSlot, may.canEdit ? upload : null)
    fill(
      history,
      events.items.length === 0
        ? h('li', { class: 'empty' }, 'Not submitted yet.')
        : events.items.map((entry) =>
            h(
              'li',
              null,
              h('strong', null, DONE[entry.action] ?? humanize(entry.action)),
              ' by ',
              byWhom(context, entry.actorId),
              ' · ',
              time(entry.occurredAt),
              h('span', { class: 'hint' }, ` ${humanize(entry.fromStatus)} → ${humanize(entry.toStatus)}`),
            ),
          ),
    )
    body.removeAttribute('aria-busy')
  }

  async function move(action: (typeof STEPS)[number]['action'], done: string) {
    const path =
      action === 'submit' ? '/api/purchase-requests/{id}/submit' : '/api/purchase-requests/{id}/approve'
    let moved: PurchaseRequest
    try {
      moved = unwrap(await resources.POST(path, { params: { path: { id } } }))
    } catch (error) {
      // The service's refusal is shown (by guard); the page then shows the request as it is now:
      // moved by someone else (409), or no longer the user's to move (403).
      await load().catch(() => {})
      throw error
    }
    notify(`“${moved.title}” ${done}.`)
    await load()
  }

  async function report() {
    const file = unwrap(
      await resources.POST('/api/purchase-requests/{id}/report', { params: { path: { id } } }),
    )
    notify(`PDF report ${file.fileName} added to the attachments.`)
    await loadAttachments()
  }

  async function loadAttachments() {
    const files = unwrap(
      await api.GET('/api/storage/files', {
        params: { query: { resourceType: 'purchase_request', resourceId: id } },
      }),
    )
    attachmentsStatus.textContent = files.items.length === 0 ? 'No attachments yet.' : ''
    fill(attachments, files.items.map(fileItem))
  }

  const fileItem = (file: FileRecord) =>
    h(
      'li',
      null,
      h('span', { class: 'file-name' }, file.fileName),
      h(
        'span',
        { class: 'hint' },
        `${file.sizeBytes === null ? '' : bytes(file.sizeBytes)} · `,
        time(file.createdAt),
      ),
      button(
        'Download',
        () =>
          void guard(alert, async () => {
            const link = unwrap(
              await api.GET('/api/storage/files/{fileId}/download-url', {
                params: { path: { fileId: file.id } },
              }),
            )
            // The store names the file (Content-Disposition: attachment): the page stays.
            location.assign(link.downloadUrl)
          }),
        { small: true, label: `Download ${file.fileName}` },
      ),
    )

  const uploader = h('input', { id: 'attach', type: 'file' })
  const upload = h('div', { class: 'upload' }, field('Attach a file', uploader), progress, uploadStatus)
  uploader.addEventListener('change', () => {
    const file = uploader.files?.[0]
    if (!file) return
    void guard(alert, async () => {
      progress.hidden = false
      progress.value = 0
      uploadStatus.textContent = `Uploading ${file.name}…`
      try {
        await context.platform.upload({
          resourceType: 'purchase_request',
          resourceId: id,
          file,
          fileName: file.name,
          onProgress: (sent, total) => {
            progress.value = total > 0 ? Math.round((sent / total) * 100) : 0
            progress.setAttribute('aria-valuetext', `${progress.value} %`)
          },
        })
        uploadStatus.textContent = `${file.name} uploaded.`
      } catch (error) {
        uploadStatus.textContent = ''
        throw error
      } finally {
        progress.hidden = true
        uploader.value = ''
      }
      await loadAttachments()
    })
  })

  void guard(alert, async () => {
    try {
      await Promise.all([load(), loadAttachments()])
    } catch (error) {
      title.textContent = 'Purchase request'
      body.removeAttribute('aria-busy')
      throw error
    }
  })

  fill(
    body,
    alert,
    card({ title: 'Workflow' }, facts, next, actions),
    card({ title: 'Attachments', description: attachmentsHint }, attachmentsStatus, attachments, uploadSlot),
    card({ title: 'History' }, history),
  )
  return h(
    'div',
    { class: 'screen' },
    h('p', { class: 'breadcrumb' }, h('a', { href: '#/purchase-requests' }, '← Purchase requests')),
    h('div', { class: 'page-head' }, h('div', { class: 'title-row' }, title, status)),
    body,
  )
}
