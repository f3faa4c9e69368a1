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
  grow,
  guard,
  h,
  notify,
  onSubmit,
  screen,
  secretDialog,
  select,
  type Tone,
  time,
  uid,
} from '../dom.ts'
import { pagedList } from '../list.ts'
import type { paths } from '../resources.schema.ts'

// The organization's API keys (admins): list by state, create one (its raw key shown once, with a
// copy button), revoke. Service accounts belong to no organization: the CLI manages them.

type ApiKeyPage = paths['/api/api-keys']['get']['responses'][200]['content']['application/json']
type ApiKey = ApiKeyPage['items'][number]
type State = NonNullable<NonNullable<paths['/api/api-keys']['get']['parameters']['query']>['state']>
type Scope = paths['/api/api-keys']['post']['requestBody']['content']['application/json']['scopes'][number]

/** Every scope the service knows, said plainly: one missing here, or one too many, fails the type check. */
const SCOPES: Record<Scope, string> = {
  'purchase_requests:read': 'Read purchase requests',
  'purchase_requests:write': 'Create, submit and approve purchase requests',
  'files:read': 'Read and download files',
  'files:write': 'Upload files',
  'config:read': 'Read the configuration',
  'config:write': 'Change the configuration',
  'authz:check': 'Check permissions',
  'audit:read': 'Read the audit events',
  'webhooks:write': 'Manage webhooks',
  'tokens:introspect': 'Introspect OAuth tokens (used by service accounts)',
}

const stateOf = (key: ApiKey, now = Date.now()): [string, Tone] =>
  key.revokedAt
    ? ['Revoked', 'neutral']
    : key.expiresAt && new Date(key.expiresAt).getTime() <= now
      ? ['Expired', 'warn']
      : ['Active', 'good']

export function apiKeysScreen(context: ConsoleContext): HTMLElement {
  const { resources } = context
  const alert = alertBox('api-keys-error')
  const createAlert = alertBox()
  let state: State | '' = 'active'

  const list = pagedList<ApiKey>({
    caption: 'API keys',
    tbodyId: 'api-keys',
    alert,
    loading: 'Loading API keys…',
    empty: 'No API key in this state.',
    failed: 'The API keys could not be loaded.',
    count: (n, more) => `${n}${more ? '+' : ''} key${n === 1 ? '' : 's'}`,
    load: async (cursor) =>
      unwrap(
        await resources.GET('/api/api-keys', {
          params: { query: { ...(cursor ? { cursor } : {}), ...(state ? { state } : {}) } },
        }),
      ),
    row: (key, tr) => {
      tr.dataset.id = key.id
    },
    columns: [
      {
        label: 'Key',
        cell: (k) => [
          h('div', { class: 'strong' }, k.description),
          h('code', { class: 'id' }, `${k.keyPrefix}…`),
        ],
      },
      {
        label: 'Scopes',
        cell: (k) =>
          h(
            'ul',
            { class: 'chips' },
            k.scopes.map((s) => h('li', { title: SCOPES[s as Scope] }, h('code', null, s))),
          ),
      },
      { label: 'Created', cell: (k) => time(k.createdAt) },
      { label: 'Expires', cell: (k) => time(k.expiresAt, 'never', 'any') },
      { label: 'Last used', cell: (k) => time(k.lastUsedAt) },
      {
        label: 'State',
        cell: (k) => {
          const [label, tone] = stateOf(k)
          return badge(label, tone)
        },
      },
      {
        label: 'Actions',
        actions: true,
        cell: (k) =>
          k.revokedAt
            ? null
            : button(
                'Revoke',
                () =>
                  void guard(alert, async () => {
                    const sure = await confirmDialog({
                      title: `Revoke the key “${k.description}”?`,
                      message:
                        'Every running instance refuses it at once. Whatever uses it stops working; this cannot be undone.',
                      confirm: 'Revoke',
                      danger: true,
                    })
                    if (!sure) return
                    unwrap(await resources.DELETE('/api/api-keys/{id}', { params: { path: { id: k.id } } }))
                    notify(`API key “${k.description}” revoked.`)
                    await list.reload()
                  }),
                { small: true, variant: 'danger', label: `Revoke ${k.description}` },
              ),
      },
    ],
  })

  const filter = select(
    'state',
    [
      ['active', 'Active'],
      ['expired', 'Expired'],
      ['revoked', 'Revoked'],
      ['', 'All keys'],
    ],
    'active',
  )
  filter.id = 'api-keys-filter'
  filter.addEventListener('change', () => {
    state = filter.value as State | ''
    void list.reload()
  })

  const scopesId = uid('scopes')
  const tomorrow = new Date(Date.now() + 24 * 3600 * 1000).toISOString().slice(0, 10)
  const create = h(
    'form',
    { id: 'api-key-form' },
    h(
      'div',
      { class: 'form-row' },
      grow(
        field(
          'Description',
          h('input', { name: 'description', required: true, maxlength: 500, autocomplete: 'off' }),
          'What the key is for: the integration that holds it.',
        ),
      ),
      field(
        h('span', null, 'Expires on ', h('span', { class: 'optional' }, '(optional)')),
        h('input', { name: 'expiresAt', type: 'date', min: tomorrow }),
        'At the end of that day. Empty: never.',
      ),
    ),
    h(
      'fieldset',
      { class: 'checks', 'aria-describedby': scopesId },
      h('legend', null, 'Scopes'),
      h(
        'p',
        { class: 'hint', id: scopesId },
        'What the key may call. Keys with a write scope also act as admins.',
      ),
      h(
        'div',
        { class: 'check-grid' },
        Object.entries(SCOPES).map(([scope, label]) =>
          h(
            'label',
            { class: 'check' },
            h('input', { type: 'checkbox', name: 'scopes', value: scope }),
            h('span', null, h('code', null, scope), h('span', { class: 'hint' }, label)),
          ),
        ),
      ),
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Create API key')),
  )
  onSubmit(create, createAlert, async () => {
    const scopes = new FormData(create).getAll('scopes').map(String) as Scope[]
    if (scopes.length === 0) throw new Error('Choose at least one scope.')
    const expires = fieldText(create, 'expiresAt')
    const created = unwrap(
      await resources.POST('/api/api-keys', {
        body: {
          description: fieldText(create, 'description'),
          scopes,
          ...(expires ? { expiresAt: new Date(`${expires}T23:59:59`).toISOString() } : {}),
        },
      }),
    )
    create.reset()
    await list.reload()
    void secretDialog({
      title: 'Your new API key',
      intro: [
        h(
          'p',
          null,
          `“${created.description}” is ready. Copy the key now: it is shown this once, and only its hash is kept.`,
        ),
        h('p', { class: 'hint' }, 'Send it in the API-key header (X-Api-Key unless configured otherwise).'),
      ],
      label: 'API key',
      secret: created.rawKey,
    })
  })

  void list.reload()
  return screen(
    'API keys',
    'Keys for partner integrations calling the API for this organization.',
    h(
      'p',
      { class: 'notice' },
      'Service accounts (client credentials for your backends) belong to no organization, so they are not here: create and disable them with the CLI, ',
      h('code', null, 'npm run cli -- service-account create'),
      '.',
    ),
    card({ title: 'Create an API key' }, createAlert, create),
    card(
      {
        title: 'Keys',
        actions: h('div', { class: 'field inline-field' }, h('label', { for: filter.id }, 'State'), filter),
      },
      alert,
      list.element,
    ),
  )
}
