import { type Schemas, unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import {
  alertBox,
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

// The organization's runtime configuration (admins): every entry with its value; set one (a new key
// or a new value), edit, remove.

type Entry = Schemas['ConfigEntry']

export function configurationScreen(context: ConsoleContext): HTMLElement {
  const { api, me } = context
  const orgId = me.organizationId
  const alert = alertBox('config-error')
  const formAlert = alertBox()

  const key = h('input', {
    name: 'key',
    required: true,
    maxlength: 128,
    pattern: '[a-z0-9][a-z0-9._\\-]{0,127}',
    autocomplete: 'off',
    spellcheck: 'false',
  })
  const value = h('textarea', { name: 'value', rows: 3, spellcheck: 'false' })
  const form = h(
    'form',
    { id: 'config-form' },
    field(
      'Key',
      key,
      'Lower-case letters, digits, dots, underscores and hyphens, e.g. purchase_request.approval_email_subject.',
    ),
    field('Value', value, 'Any text up to 64 KiB. Saving an existing key replaces its value.'),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Save entry')),
  )
  onSubmit(form, formAlert, async () => {
    const entryKey = fieldText(form, 'key')
    unwrap(
      await api.PUT('/api/organizations/{orgId}/config/{key}', {
        params: { path: { orgId, key: entryKey } },
        body: { value: value.value },
      }),
    )
    form.reset()
    notify(`${entryKey} saved.`)
    await list.reload()
  })

  const list = pagedList<Entry>({
    caption: 'Configuration entries',
    tbodyId: 'config',
    alert,
    loading: 'Loading the configuration…',
    empty: 'No entry yet: the service’s defaults apply.',
    failed: 'The configuration could not be loaded.',
    count: (n) => `${n} entr${n === 1 ? 'y' : 'ies'}`,
    load: async () => ({
      items: unwrap(await api.GET('/api/organizations/{orgId}/config', { params: { path: { orgId } } }))
        .items,
      nextCursor: null,
    }),
    row: (entry, tr) => {
      tr.dataset.key = entry.key
    },
    columns: [
      { label: 'Key', cell: (e) => h('code', { class: 'strong' }, e.key) },
      {
        label: 'Value',
        cell: (e) =>
          e.value === '' ? h('span', { class: 'hint' }, '(empty)') : h('pre', { class: 'value' }, e.value),
      },
      { label: 'Updated', cell: (e) => time(e.updatedAt) },
      {
        label: 'Actions',
        actions: true,
        cell: (e) =>
          h(
            'div',
            { class: 'row-actions' },
            button(
              'Edit',
              () => {
                key.value = e.key
                value.value = e.value
                value.focus()
              },
              { small: true, label: `Edit ${e.key}` },
            ),
            button(
              'Remove',
              () =>
                void guard(alert, async () => {
                  const sure = await confirmDialog({
                    title: `Remove ${e.key}?`,
                    message: 'The service’s default applies again, on every instance.',
                    confirm: 'Remove',
                    danger: true,
                  })
                  if (!sure) return
                  unwrap(
                    await api.DELETE('/api/organizations/{orgId}/config/{key}', {
                      params: { path: { orgId, key: e.key } },
                    }),
                  )
                  notify(`${e.key} removed.`)
                  await list.reload()
                }),
              { small: true, variant: 'danger', label: `Remove ${e.key}` },
            ),
          ),
      },
    ],
  })

  void list.reload()
  return screen(
    'Configuration',
    `Runtime settings of ${me.organizationName}, read by the service on every instance.`,
    card({ title: 'Set an entry' }, formAlert, form),
    card({ title: 'Entries' }, alert, list.element),
  )
}
