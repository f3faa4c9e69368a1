import { alertBox, button, type Child, describeError, fill, h, uid } from './dom.ts'

// One list for every screen: a table paged with the API's cursors ("Load more" while the answer
// holds a nextCursor), with its loading, empty and failed states, and rows that become labelled
// blocks on a narrow screen.

export interface Page<T> {
  items: T[]
  nextCursor: string | null
}

export interface Column<T> {
  label: string
  cell: (item: T) => Child
  /** The actions column: no heading shown before its cells on a narrow screen. */
  actions?: boolean
}

export interface ListOptions<T> {
  /** The table's accessible name. */
  caption: string
  columns: Column<T>[]
  /** One page; `cursor` is null for the first. A list the API does not page answers nextCursor null. */
  load: (cursor: string | null) => Promise<Page<T>>
  loading: string
  empty: string
  failed: string
  /** What the status line says once rows are shown (default: nothing). */
  count?: (shown: number, more: boolean) => string
  tbodyId?: string
  statusId?: string
  /** Where a failure's detail goes (default: the list's own alert). */
  alert?: HTMLElement
  /** Gets aria-busy while a page loads (default: the list's element). */
  busyOn?: HTMLElement
  row?: (item: T, tr: HTMLTableRowElement) => void
  /**
   * More about an item, in a full-width row under its own, shown by the item's Details button (a
   * last column): room a cell would not give.
   */
  detail?: { label: (item: T) => string; content: (item: T) => Child }
}

export interface PagedList<T> {
  element: HTMLElement
  readonly items: T[]
  reload(): Promise<void>
}

export function pagedList<T>(options: ListOptions<T>): PagedList<T> {
  const alert = options.alert ?? alertBox()
  const columns: Column<T>[] = options.detail
    ? [...options.columns, { label: 'Details', actions: true, cell: () => null }]
    : options.columns
  const status = h('p', { class: 'list-status', id: options.statusId, 'aria-live': 'polite' })
  const tbody = h('tbody', { id: options.tbodyId })
  const table = h(
    'table',
    { class: 'table stack', hidden: true },
    h('caption', { class: 'sr-only' }, options.caption),
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        columns.map((column) =>
          h(
            'th',
            { scope: 'col' },
            column.actions ? h('span', { class: 'sr-only' }, column.label) : column.label,
          ),
        ),
      ),
    ),
    tbody,
  )
  const more = button('Load more', () => void page(false), { variant: 'secondary' })
  more.hidden = true
  const element = h(
    'div',
    { class: 'list' },
    options.alert ? null : alert,
    h('div', { class: 'table-wrap' }, table),
    status,
    h('div', { class: 'list-more' }, more),
  )
  const busyOn = options.busyOn ?? element
  const items: T[] = []
  let cursor: string | null = null
  // A newer load makes an older answer moot (a filter changed while a page was on its way).
  let generation = 0

  const rowOf = (item: T): HTMLTableRowElement[] => {
    const tr = h('tr')
    for (const column of columns)
      tr.append(
        h('td', { 'data-label': column.actions ? '' : column.label }, h('div', null, column.cell(item))),
      )
    options.row?.(item, tr)
    if (!options.detail) return [tr]
    const { label, content } = options.detail
    const id = uid('detail')
    const more = h('tr', { class: 'detail-row', id, hidden: true })
    const toggle = h(
      'button',
      {
        type: 'button',
        class: 'btn ghost small',
        'aria-expanded': 'false',
        'aria-controls': id,
        'aria-label': label(item),
      },
      'Details',
    )
    toggle.addEventListener('click', () => {
      const open = more.hidden
      if (open && more.childElementCount === 0)
        more.append(h('td', { colspan: columns.length, 'data-label': '' }, h('div', null, content(item))))
      more.hidden = !open
      toggle.setAttribute('aria-expanded', String(open))
    })
    tr.lastElementChild?.firstElementChild?.append(toggle)
    return [tr, more]
  }

  async function page(first: boolean) {
    const mine = ++generation
    busyOn.setAttribute('aria-busy', 'true')
    alert.textContent = ''
    more.disabled = true
    if (first) status.textContent = options.loading
    try {
      const answer = await options.load(first ? null : cursor)
      if (mine !== generation) return
      if (first) items.length = 0
      items.push(...answer.items)
      const rows = answer.items.flatMap(rowOf)
      if (first) tbody.replaceChildren(...rows)
      else tbody.append(...rows)
      cursor = answer.nextCursor
      more.hidden = cursor === null
      table.hidden = items.length === 0
      status.textContent =
        items.length === 0 ? options.empty : (options.count?.(items.length, cursor !== null) ?? '')
    } catch (error) {
      if (mine !== generation) return
      if (first) {
        items.length = 0
        tbody.replaceChildren()
        table.hidden = true
        more.hidden = true
      }
      fill(
        status,
        `${options.failed} `,
        button('Try again', () => void page(first), { small: true }),
      )
      alert.textContent = describeError(error)
    } finally {
      if (mine === generation) {
        busyOn.removeAttribute('aria-busy')
        more.disabled = false
      }
    }
  }

  return {
    element,
    items,
    reload: () => page(true),
  }
}
