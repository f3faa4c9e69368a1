import { unwrap } from '../../../client/src/index.ts'
import type { ConsoleContext } from '../context.ts'
import { alertBox, badge, button, card, fill, guard, h, humanize, screen, time } from '../dom.ts'
import type { paths } from '../resources.schema.ts'

// The outboxes (admins, read-only): what each queue still has to deliver (mail, authorization
// tuples, webhooks) and the messages it gave up on, with their last error.

type Status = paths['/api/outbox-status']['get']['responses'][200]['content']['application/json']

export function outboxScreen(context: ConsoleContext): HTMLElement {
  const { resources } = context
  const alert = alertBox('outbox-error')
  const queues = h('div', { id: 'outboxes', class: 'stat-grid' })
  const letters = h('div', { id: 'dead-letters' })
  const status = h('p', { class: 'list-status', 'aria-live': 'polite' }, 'Loading the outboxes…')
  const body = h('div', { 'aria-busy': 'true' }, status, queues)

  function show(answer: Status) {
    status.textContent = ''
    fill(
      queues,
      answer.outboxes.map((outbox) =>
        h(
          'section',
          { class: 'stat', 'aria-label': `${humanize(outbox.kind)} outbox` },
          h('h3', null, humanize(outbox.kind)),
          h(
            'p',
            { class: 'stat-value' },
            String(outbox.pending),
            h('span', { class: 'stat-unit' }, ' pending'),
          ),
          outbox.deadLetters > 0
            ? badge(`${outbox.deadLetters} dead letter${outbox.deadLetters === 1 ? '' : 's'}`, 'bad')
            : badge('No dead letters', 'good'),
        ),
      ),
    )
    fill(
      letters,
      answer.deadLetters.length === 0
        ? h(
            'p',
            { class: 'list-status' },
            'No dead letters: every message was delivered or is still being tried.',
          )
        : h(
            'div',
            { class: 'table-wrap' },
            h(
              'table',
              { class: 'table stack' },
              h('caption', { class: 'sr-only' }, 'Dead letters, newest first'),
              h(
                'thead',
                null,
                h(
                  'tr',
                  null,
                  ['Outbox', 'Message', 'Attempts', 'Gave up', 'Last error'].map((label) =>
                    h('th', { scope: 'col' }, label),
                  ),
                ),
              ),
              h(
                'tbody',
                null,
                answer.deadLetters.map((letter) =>
                  h(
                    'tr',
                    null,
                    h('td', { 'data-label': 'Outbox' }, humanize(letter.kind)),
                    h(
                      'td',
                      { 'data-label': 'Message' },
                      letter.what,
                      h('br'),
                      h('code', { class: 'id' }, String(letter.id)),
                    ),
                    h('td', { 'data-label': 'Attempts' }, String(letter.attempts)),
                    h('td', { 'data-label': 'Gave up' }, time(letter.failedAt)),
                    h(
                      'td',
                      { 'data-label': 'Last error' },
                      h('pre', { class: 'value' }, letter.lastError ?? ''),
                    ),
                  ),
                ),
              ),
            ),
          ),
    )
  }

  const load = () =>
    guard(alert, async () => {
      body.setAttribute('aria-busy', 'true')
      try {
        show(unwrap(await resources.GET('/api/outbox-status')))
      } catch (error) {
        status.textContent = 'The outbox status could not be loaded.'
        throw error
      } finally {
        body.removeAttribute('aria-busy')
      }
    })
  void load()
  return screen(
    'Outbox',
    'Side effects the service queues in the same transaction as the change that causes them, and delivers afterwards.',
    alert,
    card({ title: 'Queues', actions: button('Refresh', () => void load(), { small: true }) }, body),
    card(
      {
        title: 'Dead letters',
        description:
          'Messages given up on after their last attempt. Read-only here: the CLI’s outbox status shows the same.',
      },
      letters,
    ),
  )
}
