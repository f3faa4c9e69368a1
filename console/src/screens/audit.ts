import { unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import { alertBox, type Child, card, field, h, onSubmit, screen, select, shortId, time, uid } from '../dom.ts'
import { describeEventType, EVENT_TYPES } from '../event-types.ts'
import { pagedList } from '../list.ts'
import type { paths } from '../resources.schema.ts'
import { deviceName } from '../user-agent.ts'

// The organization's audit trail (admins): newest first, filtered by type, actor, subject and time,
// paged with the API's cursor; the same filters export NDJSON.

type AuditPage = paths['/api/audit-events']['get']['responses'][200]['content']['application/json']
type AuditEvent = AuditPage['items'][number]
type Query = NonNullable<paths['/api/audit-events']['get']['parameters']['query']>
type Filters = Omit<Query, 'cursor' | 'limit'>

const ACTORS: [string, string][] = [
  ['', 'Anyone'],
  ['user', 'User'],
  ['api_key', 'API key'],
  ['service_account', 'Service account'],
  ['system', 'The service'],
]

export function auditScreen(context: ConsoleContext): HTMLElement {
  const { resources, me } = context
  const alert = alertBox('audit-error')
  let filters: Filters = {}
  const head = h('p', { class: 'hint', id: 'audit-head' })
  const exportLink = h(
    'a',
    {
      class: 'btn secondary',
      href: '/api/audit-events/export',
      download: 'audit-events.ndjson',
      id: 'audit-export',
    },
    'Export NDJSON',
  )

  const actor = (event: AuditEvent) => {
    const { type, id } = event.actor
    if (type === 'system') return 'The service'
    const label = ACTORS.find(([value]) => value === type)?.[1] ?? type
    if (!id) return label
    return type === 'user' && id === me.userId ? 'You' : [`${label} `, shortId(id)]
  }

  const details = (event: AuditEvent) => {
    const entries: [string, Child][] = [
      ...Object.entries(event.data).map(([key, value]): [string, string] => [key, String(value)]),
      ['Event type', h('code', null, event.type)],
      ['Actor', event.actor.id ? h('code', null, `${event.actor.type} ${event.actor.id}`) : event.actor.type],
      ['Subject', event.subject ? h('code', null, `${event.subject.type} ${event.subject.id}`) : '—'],
      ['Device', event.userAgent ? h('span', { title: event.userAgent }, deviceName(event.userAgent)) : '—'],
      ['Request id', event.requestId ? h('code', null, event.requestId) : '—'],
      ['Sequence', String(event.sequence)],
      ['Hash', h('code', { class: 'hash' }, event.hash)],
    ]
    return h(
      'dl',
      { class: 'facts compact' },
      entries.map(([k, v]) => h('div', null, h('dt', null, k), h('dd', null, v))),
    )
  }

  const list = pagedList<AuditEvent>({
    caption: 'Audit events, newest first',
    tbodyId: 'audit-events',
    alert,
    loading: 'Loading audit events…',
    empty: 'No event matches these filters.',
    failed: 'The audit events could not be loaded.',
    count: (n, more) => `${n}${more ? '+' : ''} event${n === 1 ? '' : 's'}`,
    load: async (cursor) => {
      const page = unwrap(
        await resources.GET('/api/audit-events', {
          params: { query: { ...filters, ...(cursor ? { cursor } : {}) } },
        }),
      )
      if (!cursor)
        head.textContent = page.head
          ? `The organization’s chain holds ${page.head.sequence} events; its head hash starts ${page.head.hash.slice(0, 12)}.`
          : 'No event recorded yet.'
      return page
    },
    row: (event, tr) => {
      tr.dataset.type = event.type
    },
    columns: [
      { label: 'When', cell: (e) => time(e.occurredAt) },
      { label: 'Event', cell: (e) => h('span', { title: e.type }, describeEventType(e.type)) },
      { label: 'Actor', cell: actor },
      {
        label: 'Subject',
        cell: (e) => (e.subject ? [`${describeEventType(e.subject.type)} `, shortId(e.subject.id)] : '—'),
      },
      { label: 'From', cell: (e) => e.ipAddress ?? '—' },
    ],
    detail: {
      label: (e) => `Details of ${describeEventType(e.type)}, ${new Date(e.occurredAt).toLocaleString()}`,
      content: details,
    },
  })

  const typesId = uid('event-types')
  const form = h(
    'form',
    { id: 'audit-filters', class: 'filters' },
    field(
      'Event type',
      h('input', {
        name: 'type',
        list: typesId,
        autocomplete: 'off',
        spellcheck: 'false',
        placeholder: 'sign_in.failed',
      }),
    ),
    h(
      'datalist',
      { id: typesId },
      EVENT_TYPES.map((type) => h('option', { value: type }, describeEventType(type))),
    ),
    field('Actor type', select('actorType', ACTORS)),
    field('Actor id', h('input', { name: 'actorId', autocomplete: 'off', spellcheck: 'false' })),
    field(
      'Subject type',
      h('input', { name: 'subjectType', autocomplete: 'off', spellcheck: 'false', placeholder: 'user' }),
    ),
    field('Subject id', h('input', { name: 'subjectId', autocomplete: 'off', spellcheck: 'false' })),
    field('From', h('input', { name: 'from', type: 'datetime-local', step: 1 })),
    field('Until', h('input', { name: 'to', type: 'datetime-local', step: 1 })),
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'submit', class: 'btn primary' }, 'Apply filters'),
      h('button', { type: 'reset', class: 'btn secondary' }, 'Clear'),
    ),
  )

  function apply() {
    const data = new FormData(form)
    const text = (name: string) => String(data.get(name) ?? '').trim()
    const instant = (name: string) => (text(name) ? new Date(text(name)).toISOString() : '')
    const chosen: Record<string, string> = {
      type: text('type'),
      actorType: text('actorType'),
      actorId: text('actorId'),
      subjectType: text('subjectType'),
      subjectId: text('subjectId'),
      from: instant('from'),
      to: instant('to'),
    }
    const kept = Object.fromEntries(Object.entries(chosen).filter(([, value]) => value !== ''))
    filters = kept as Filters
    exportLink.href = `/api/audit-events/export${Object.keys(kept).length > 0 ? `?${new URLSearchParams(kept)}` : ''}`
    return list.reload()
  }
  onSubmit(form, alert, apply)
  form.addEventListener('reset', () => {
    // The event comes before the browser clears the fields.
    setTimeout(() => void apply())
  })

  void list.reload()
  return screen(
    'Audit events',
    'What happened in the organization, by whom and from where: recorded in the same transaction as the change, hash-chained.',
    card({ title: 'Filters', actions: exportLink }, form),
    card({ title: 'Events' }, head, alert, list.element),
  )
}
