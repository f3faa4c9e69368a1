import { unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import {
  alertBox,
  badge,
  button,
  card,
  confirmDialog,
  field,
  fieldText,
  fill,
  grow,
  guard,
  h,
  notify,
  onSubmit,
  screen,
  secretDialog,
  shortId,
  type Tone,
  time,
  uid,
} from '../dom.ts'
import { describeEventType, EVENT_TYPES } from '../event-types.ts'
import { pagedList } from '../list.ts'
import type { paths } from '../resources.schema.ts'

// The organization's webhooks (admins): endpoints that receive its audit events signed as Standard
// Webhooks. Create one (its whsec_ secret shown once), change its address, events or state, send a
// test, rotate the secret (the new one shown once), delete; and each endpoint's delivery attempts.

type Webhook = paths['/api/webhooks/{id}']['get']['responses'][200]['content']['application/json']
type Attempt =
  paths['/api/webhooks/{id}/deliveries']['get']['responses'][200]['content']['application/json']['items'][number]

const ALL = '*'

const stateOf = (webhook: Webhook): [string, Tone] =>
  webhook.enabled
    ? ['Enabled', 'good']
    : webhook.disabledReason === 'gone'
      ? ['Disabled: the receiver answered 410 Gone', 'bad']
      : webhook.disabledReason === 'failing'
        ? ['Disabled: deliveries kept failing', 'bad']
        : ['Disabled', 'neutral']

const eventsOf = (webhook: Webhook) =>
  webhook.eventTypes.includes(ALL) ? 'All events' : webhook.eventTypes.map(describeEventType).join(', ')

/** "All events" or a choice of types (the known ones as boxes, any other typed in). */
function eventPicker(selected: readonly string[]) {
  const name = uid('events')
  const all = selected.length === 0 || selected.includes(ALL)
  const legendId = uid('legend')
  const everything = h('input', { type: 'radio', name, value: 'all', checked: all })
  const some = h('input', { type: 'radio', name, value: 'some', checked: !all })
  const boxes = EVENT_TYPES.map((type) =>
    h('input', { type: 'checkbox', value: type, checked: selected.includes(type) }),
  )
  const others = h('input', {
    autocomplete: 'off',
    spellcheck: 'false',
    value: selected.filter((t) => t !== ALL && !(EVENT_TYPES as readonly string[]).includes(t)).join(', '),
  })
  const choice = h(
    'div',
    { class: 'event-choice', hidden: all },
    h(
      'div',
      { class: 'check-grid' },
      EVENT_TYPES.map((type, i) =>
        h(
          'label',
          { class: 'check' },
          boxes[i],
          h('span', null, describeEventType(type), h('code', { class: 'hint' }, type)),
        ),
      ),
    ),
    field('Other event types', others, 'Comma-separated, for types of your own features.'),
  )
  const sync = () => {
    choice.hidden = everything.checked
  }
  everything.addEventListener('change', sync)
  some.addEventListener('change', sync)
  const element = h(
    'fieldset',
    { class: 'checks', 'aria-labelledby': legendId },
    h('legend', { id: legendId }, 'Events'),
    h(
      'div',
      { class: 'radios' },
      h('label', { class: 'check' }, everything, h('span', null, 'All events, including types added later')),
      h('label', { class: 'check' }, some, h('span', null, 'Only the events I choose')),
    ),
    choice,
  )
  return {
    element,
    /** Shows the boxes or not, as the radios now say (after a form's reset). */
    sync,
    value(): string[] {
      if (everything.checked) return [ALL]
      const chosen = [
        ...EVENT_TYPES.filter((_, i) => boxes[i]?.checked),
        ...others.value
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean),
      ]
      if (chosen.length === 0) throw new Error('Choose at least one event type, or all events.')
      return [...new Set(chosen)]
    },
  }
}

export function webhooksScreen(context: ConsoleContext): HTMLElement {
  const { resources } = context
  const alert = alertBox('webhooks-error')
  const createAlert = alertBox()

  const list = pagedList<Webhook>({
    caption: 'Webhook endpoints',
    tbodyId: 'webhooks',
    alert,
    loading: 'Loading webhooks…',
    empty: 'No endpoint yet.',
    failed: 'The webhooks could not be loaded.',
    count: (n) => `${n} endpoint${n === 1 ? '' : 's'}`,
    load: async () => ({ items: unwrap(await resources.GET('/api/webhooks')).items, nextCursor: null }),
    row: (webhook, tr) => {
      tr.dataset.id = webhook.id
    },
    columns: [
      {
        label: 'Endpoint',
        cell: (w) => [
          h('a', { href: `#/webhooks/${w.id}`, class: 'strong' }, w.description || w.url),
          w.description ? h('div', null, h('code', { class: 'url' }, w.url)) : null,
        ],
      },
      { label: 'Events', cell: eventsOf },
      {
        label: 'State',
        cell: (w) => {
          const [label, tone] = stateOf(w)
          return badge(label, tone)
        },
      },
      { label: 'Created', cell: (w) => time(w.createdAt) },
    ],
  })

  const events = eventPicker([ALL])
  const create = h(
    'form',
    { id: 'webhook-form' },
    h(
      'div',
      { class: 'form-row' },
      grow(
        field(
          'Endpoint URL',
          h('input', {
            name: 'url',
            type: 'url',
            required: true,
            maxlength: 2000,
            placeholder: 'https://example.com/webhooks',
          }),
          'https, to a public address. Deliveries are POSTed there, signed.',
        ),
      ),
      grow(
        field(
          h('span', null, 'Description ', h('span', { class: 'optional' }, '(optional)')),
          h('input', { name: 'description', maxlength: 500, autocomplete: 'off' }),
        ),
      ),
    ),
    events.element,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Add endpoint')),
  )
  // A form's reset puts the radios back; its event comes before it does.
  create.addEventListener('reset', () => setTimeout(events.sync))
  onSubmit(create, createAlert, async () => {
    const description = fieldText(create, 'description')
    const created = unwrap(
      await resources.POST('/api/webhooks', {
        body: {
          url: fieldText(create, 'url'),
          eventTypes: events.value(),
          enabled: true,
          ...(description ? { description } : {}),
        },
      }),
    )
    create.reset()
    await list.reload()
    void secretDialog({
      title: 'Signing secret',
      intro: h(
        'p',
        null,
        'Verify every delivery with this secret (Standard Webhooks). Copy it now: it is shown this once.',
      ),
      label: 'Signing secret',
      secret: created.secret,
    })
  })

  void list.reload()
  return screen(
    'Webhooks',
    'Endpoints that receive the organization’s audit events as they happen, signed as Standard Webhooks.',
    card({ title: 'Add an endpoint' }, createAlert, create),
    card({ title: 'Endpoints' }, alert, list.element),
  )
}

const OUTCOMES: Record<Attempt['outcome'], [string, Tone]> = {
  delivered: ['Delivered', 'good'],
  retrying: ['Will retry', 'warn'],
  dead_letter: ['Gave up', 'bad'],
  endpoint_disabled: ['Endpoint disabled', 'bad'],
}

export function webhookScreen(context: ConsoleContext, [id = '']: string[]): HTMLElement {
  const { resources } = context
  const path = { params: { path: { id } } }
  const alert = alertBox('webhook-error')
  const title = h('h1', { tabindex: '-1', id: 'webhook-title' }, 'Webhook')
  const state = h('span', { class: 'title-status' })
  const settings = h(
    'div',
    { 'aria-busy': 'true' },
    h('p', { class: 'list-status' }, 'Loading the endpoint…'),
  )
  const secretNote = h('p', { class: 'hint' })

  const deliveries = pagedList<Attempt>({
    caption: 'Delivery attempts, newest first',
    tbodyId: 'deliveries',
    loading: 'Loading deliveries…',
    empty: 'No delivery attempt yet. Send a test to see one.',
    failed: 'The deliveries could not be loaded.',
    count: (n, more) => `${n}${more ? '+' : ''} attempt${n === 1 ? '' : 's'}`,
    load: async (cursor) =>
      unwrap(
        await resources.GET('/api/webhooks/{id}/deliveries', {
          params: { path: { id }, query: cursor ? { cursor } : {} },
        }),
      ),
    columns: [
      { label: 'When', cell: (a) => time(a.attemptedAt) },
      { label: 'Event', cell: (a) => [describeEventType(a.eventType), h('div', null, shortId(a.messageId))] },
      { label: 'Attempt', cell: (a) => String(a.attempt) },
      { label: 'Answer', cell: (a) => (a.statusCode === null ? 'No answer' : `HTTP ${a.statusCode}`) },
      { label: 'Took', cell: (a) => `${a.durationMs} ms` },
      {
        label: 'Outcome',
        cell: (a) => {
          const [label, tone] = OUTCOMES[a.outcome]
          return badge(label, tone)
        },
      },
      { label: 'Error', cell: (a) => (a.error ? h('span', { class: 'error-text' }, a.error) : '—') },
    ],
  })

  function show(webhook: Webhook) {
    title.textContent = webhook.description || webhook.url
    document.title = `${title.textContent} · Platform core console`
    const [label, tone] = stateOf(webhook)
    fill(state, badge(label, tone))
    secretNote.textContent = webhook.previousSecretExpiresAt
      ? `Deliveries carry a second signature, with the previous secret, until ${new Date(webhook.previousSecretExpiresAt).toLocaleString()}.`
      : ''
    const events = eventPicker(webhook.eventTypes)
    const enabled = h('input', { type: 'checkbox', name: 'enabled', checked: webhook.enabled })
    const formAlert = alertBox()
    const form = h(
      'form',
      { id: 'webhook-edit-form' },
      field(
        'Endpoint URL',
        h('input', { name: 'url', type: 'url', required: true, maxlength: 2000, value: webhook.url }),
      ),
      field(
        'Description',
        h('input', { name: 'description', maxlength: 500, autocomplete: 'off', value: webhook.description }),
      ),
      events.element,
      h(
        'label',
        { class: 'check' },
        enabled,
        h(
          'span',
          null,
          'Enabled',
          h('span', { class: 'hint' }, ' Enabling a disabled endpoint again clears its failure record.'),
        ),
      ),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Save changes')),
    )
    onSubmit(form, formAlert, async () => {
      const updated = unwrap(
        await resources.PATCH('/api/webhooks/{id}', {
          ...path,
          body: {
            url: fieldText(form, 'url'),
            description: fieldText(form, 'description'),
            eventTypes: events.value(),
            enabled: enabled.checked,
          },
        }),
      )
      notify('Webhook saved.')
      show(updated)
    })
    fill(settings, formAlert, form)
    settings.removeAttribute('aria-busy')
  }

  const load = () =>
    guard(alert, async () => {
      try {
        show(unwrap(await resources.GET('/api/webhooks/{id}', path)))
      } catch (error) {
        fill(settings, h('p', { class: 'list-status' }, 'The endpoint could not be loaded.'))
        settings.removeAttribute('aria-busy')
        throw error
      }
    })

  const actions = h(
    'div',
    { class: 'actions' },
    button(
      'Send test',
      () =>
        void guard(alert, async () => {
          const sent = unwrap(await resources.POST('/api/webhooks/{id}/test', path))
          notify(`Test event queued as ${sent.messageId}: its attempt shows under Deliveries once made.`)
          await deliveries.reload()
        }),
      { variant: 'primary' },
    ),
    button(
      'Rotate secret',
      () =>
        void guard(alert, async () => {
          const sure = await confirmDialog({
            title: 'Rotate the signing secret?',
            message:
              'A new secret signs every delivery from now on. For 24 hours deliveries also carry a signature made with the current one, while the receiver switches.',
            confirm: 'Rotate secret',
          })
          if (!sure) return
          const rotated = unwrap(await resources.POST('/api/webhooks/{id}/rotate-secret', path))
          show(rotated)
          void secretDialog({
            title: 'New signing secret',
            intro: h('p', null, 'Give it to the receiver. Copy it now: it is shown this once.'),
            label: 'Signing secret',
            secret: rotated.secret,
          })
        }),
    ),
    button(
      'Delete',
      () =>
        void guard(alert, async () => {
          const sure = await confirmDialog({
            title: 'Delete this endpoint?',
            message: 'Nothing more is delivered to it, and its delivery record goes with it.',
            confirm: 'Delete',
            danger: true,
          })
          if (!sure) return
          unwrap(await resources.DELETE('/api/webhooks/{id}', path))
          notify('Webhook deleted.')
          context.navigate('#/webhooks')
        }),
      { variant: 'danger' },
    ),
  )

  void load()
  void deliveries.reload()
  return h(
    'div',
    { class: 'screen' },
    h('p', { class: 'breadcrumb' }, h('a', { href: '#/webhooks' }, '← Webhooks')),
    h('div', { class: 'page-head' }, h('div', { class: 'title-row' }, title, state), actions),
    alert,
    card({ title: 'Settings' }, secretNote, settings),
    card(
      {
        title: 'Deliveries',
        actions: button('Refresh', () => void deliveries.reload(), { small: true }),
        description:
          'Every attempt, with the receiver’s answer. A failing message is retried for about three days.',
      },
      deliveries.element,
    ),
  )
}
