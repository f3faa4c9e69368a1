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
  select,
  type Tone,
  time,
} from '../dom.ts'
import { viewAs } from '../impersonation.ts'
import { pagedList } from '../list.ts'
import type { paths } from '../resources.schema.ts'

// The organization's users (admins): who they are, how they sign in; invite, resend an invitation,
// change a role, unlock, deactivate and reactivate; view the console as an active member. An admin's
// own row offers none of these.

type UserPage = paths['/api/users']['get']['responses'][200]['content']['application/json']
type User = UserPage['items'][number]
type Status = User['status']
type Role = User['role']

const STATUS: Record<Status, [string, Tone]> = {
  active: ['Active', 'good'],
  invited: ['Invited', 'info'],
  deactivated: ['Deactivated', 'neutral'],
  locked: ['Locked', 'bad'],
}

export function usersScreen(context: ConsoleContext): HTMLElement {
  const { resources, me } = context
  const alert = alertBox('users-error')
  const inviteAlert = alertBox()
  let status: Status | '' = ''

  /** Runs a row's action, then shows the list afresh with a confirmation. */
  const act = (task: () => Promise<string | undefined>) =>
    void guard(alert, async () => {
      const done = await task()
      if (done === undefined) return
      notify(done)
      await list.reload()
    })

  const actionsOf = (user: User) => {
    // Not on one's own account: the service keeps the last admin anyway, and a mistake locks one out.
    if (user.id === me.userId) return null
    const path = { params: { path: { id: user.id } } }
    const role: Role = user.role === 'admin' ? 'member' : 'admin'
    return h(
      'div',
      { class: 'row-actions' },
      user.status === 'active' && user.role === 'member'
        ? button('View as', () => void guard(alert, () => viewAs(context, user)), {
            small: true,
            label: `View as ${user.email}`,
          })
        : null,
      user.status === 'invited'
        ? button(
            'Resend invitation',
            () =>
              act(async () => {
                unwrap(await resources.POST('/api/users/{id}/resend-invitation', path))
                return `Invitation sent to ${user.email} again.`
              }),
            { small: true, label: `Resend invitation to ${user.email}` },
          )
        : null,
      user.status === 'locked'
        ? button(
            'Unlock',
            () =>
              act(async () => {
                unwrap(await resources.POST('/api/users/{id}/unlock', path))
                return `${user.email} can sign in again.`
              }),
            { small: true, label: `Unlock ${user.email}` },
          )
        : null,
      user.status === 'deactivated'
        ? null
        : button(
            role === 'admin' ? 'Make admin' : 'Make member',
            () =>
              act(async () => {
                const sure = await confirmDialog({
                  title: role === 'admin' ? `Make ${user.email} an admin?` : `Make ${user.email} a member?`,
                  message:
                    role === 'admin'
                      ? 'Admins manage the organization: its users, API keys, webhooks and configuration, and approve purchase requests.'
                      : 'They keep their account and lose the organization’s administration.',
                  confirm: role === 'admin' ? 'Make admin' : 'Make member',
                })
                if (!sure) return undefined
                unwrap(await resources.PATCH('/api/users/{id}', { ...path, body: { role } }))
                return `${user.email} is now ${role === 'admin' ? 'an admin' : 'a member'}.`
              }),
            { small: true, label: `${role === 'admin' ? 'Make admin' : 'Make member'}: ${user.email}` },
          ),
      user.status === 'deactivated'
        ? button(
            'Reactivate',
            () =>
              act(async () => {
                unwrap(await resources.POST('/api/users/{id}/reactivate', path))
                return `${user.email} is active again.`
              }),
            { small: true, label: `Reactivate ${user.email}` },
          )
        : button(
            'Deactivate',
            () =>
              act(async () => {
                const sure = await confirmDialog({
                  title: `Deactivate ${user.email}?`,
                  message:
                    'Their sessions end on every instance and they can no longer sign in. The account is kept: you can reactivate it.',
                  confirm: 'Deactivate',
                  danger: true,
                })
                if (!sure) return undefined
                unwrap(await resources.POST('/api/users/{id}/deactivate', path))
                return `${user.email} is deactivated.`
              }),
            { small: true, variant: 'danger', label: `Deactivate ${user.email}` },
          ),
    )
  }

  const list = pagedList<User>({
    caption: 'Users of the organization',
    tbodyId: 'users',
    alert,
    loading: 'Loading users…',
    empty: 'No user in this state.',
    failed: 'The users could not be loaded.',
    count: (n, more) => `${n}${more ? '+' : ''} user${n === 1 ? '' : 's'}`,
    load: async (cursor) =>
      unwrap(
        await resources.GET('/api/users', {
          params: { query: { ...(cursor ? { cursor } : {}), ...(status ? { status } : {}) } },
        }),
      ),
    row: (user, tr) => {
      tr.dataset.id = user.id
    },
    columns: [
      {
        label: 'User',
        cell: (u) => [
          h('span', { class: 'strong' }, u.email),
          u.id === me.userId ? h('span', { class: 'hint' }, ' (you)') : null,
        ],
      },
      {
        label: 'Role',
        cell: (u) => badge(u.role === 'admin' ? 'Admin' : 'Member', u.role === 'admin' ? 'info' : 'neutral'),
      },
      {
        label: 'Status',
        cell: (u) => {
          const [label, tone] = STATUS[u.status]
          return [
            badge(label, tone),
            u.status === 'locked' && u.lockedUntil ? [' until ', time(u.lockedUntil, '', 'any')] : null,
          ]
        },
      },
      {
        label: 'Signs in with',
        cell: (u) =>
          u.status === 'invited'
            ? h('span', { class: 'hint' }, 'Not signed up yet')
            : [
                'Password',
                u.otpEnabled ? 'one-time code' : null,
                u.passkeyCount > 0 ? `${u.passkeyCount} passkey${u.passkeyCount === 1 ? '' : 's'}` : null,
              ]
                .filter(Boolean)
                .join(', '),
      },
      { label: 'Joined', cell: (u) => time(u.createdAt) },
      { label: 'Actions', actions: true, cell: actionsOf },
    ],
  })

  const filter = select('status', [
    ['', 'All users'],
    ['active', 'Active'],
    ['invited', 'Invited'],
    ['locked', 'Locked'],
    ['deactivated', 'Deactivated'],
  ])
  filter.id = 'users-filter'
  filter.addEventListener('change', () => {
    status = filter.value as Status | ''
    void list.reload()
  })

  const invite = h(
    'form',
    { id: 'invite-form', class: 'inline-form' },
    grow(field('Email', h('input', { name: 'email', type: 'email', required: true, autocomplete: 'off' }))),
    field(
      'Role',
      select('role', [
        ['member', 'Member'],
        ['admin', 'Admin'],
      ]),
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'btn primary' }, 'Invite')),
  )
  onSubmit(invite, inviteAlert, async () => {
    const email = fieldText(invite, 'email')
    unwrap(
      await resources.POST('/api/users', {
        body: {
          email,
          organizationId: me.organizationId,
          role: fieldText(invite, 'role') === 'admin' ? 'admin' : 'member',
        },
      }),
    )
    invite.reset()
    notify(`Invitation sent to ${email}.`)
    await list.reload()
  })

  void list.reload()
  return screen(
    'Users',
    `The people of ${me.organizationName}.`,
    card(
      {
        title: 'Invite a user',
        description: 'They get an email with a link to choose their password; the link works once.',
      },
      inviteAlert,
      invite,
    ),
    card(
      {
        title: 'Users',
        actions: h('div', { class: 'field inline-field' }, h('label', { for: filter.id }, 'Status'), filter),
      },
      alert,
      list.element,
    ),
  )
}
