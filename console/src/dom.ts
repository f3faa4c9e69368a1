import { PlatformError } from '../../client/src/index.ts'

// The console's few DOM helpers: an element builder, times shown relative with the absolute one at
// hand, badges, buttons, and the one way every screen reports a failure (the problem's detail and
// code, never a bare status).

export type Child = Node | string | number | null | undefined | false | Child[]
type Attributes = Record<string, unknown>

const flatten = (children: Child[]): (Node | string)[] =>
  children.flatMap((child) =>
    Array.isArray(child)
      ? flatten(child)
      : child === null || child === undefined || child === false
        ? []
        : [typeof child === 'number' ? String(child) : child],
  )

/**
 * An element with attributes and children. `on<event>` attributes holding a function are listeners;
 * `true` is an empty attribute, `false`, null and undefined are left out; `value` is set as the
 * property once the children (a select's options) are in.
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Attributes | null = null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag)
  let value: unknown
  for (const [name, attribute] of Object.entries(attributes ?? {})) {
    if (attribute === undefined || attribute === null || attribute === false) continue
    if (name === 'value') value = attribute
    else if (name.startsWith('on') && typeof attribute === 'function')
      element.addEventListener(name.slice(2), attribute as EventListener)
    else element.setAttribute(name, attribute === true ? '' : String(attribute))
  }
  element.append(...flatten(children))
  if (value !== undefined) Reflect.set(element, 'value', String(value))
  return element
}

/** Replaces an element's children. */
export const fill = (element: Element, ...children: Child[]) => element.replaceChildren(...flatten(children))

let ids = 0
/** A page-unique id, for labels and descriptions made in code. */
export const uid = (prefix: string) => `${prefix}-${++ids}`

// Times --------------------------------------------------------------------------------------------

const relativeFormat = new Intl.RelativeTimeFormat('en', { numeric: 'auto' })
const absoluteFormat = new Intl.DateTimeFormat('en', { dateStyle: 'medium', timeStyle: 'medium' })
const UNITS: [Intl.RelativeTimeFormatUnit, number][] = [
  ['year', 365 * 24 * 3600],
  ['month', 30 * 24 * 3600],
  ['week', 7 * 24 * 3600],
  ['day', 24 * 3600],
  ['hour', 3600],
  ['minute', 60],
]

/** "3 minutes ago", "in 2 days", "now". */
export function relative(date: Date, now = Date.now()): string {
  const seconds = Math.round((date.getTime() - now) / 1000)
  if (Math.abs(seconds) < 45) return 'just now'
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size * (unit === 'minute' ? 0.75 : 1))
      return relativeFormat.format(Math.round(seconds / size), unit)
  }
  return relativeFormat.format(Math.round(seconds / 60), 'minute')
}

export const absolute = (date: Date) => absoluteFormat.format(date)

/**
 * A <time> showing `iso` relative to now, the absolute time in its title; `fallback` for null. A
 * time that has happened (`past`, the default) is never shown as to come: the service's clock may
 * run a little ahead of the browser's.
 */
export function time(
  iso: string | null | undefined,
  fallback = 'never',
  when: 'past' | 'any' = 'past',
): HTMLElement | string {
  if (!iso) return fallback
  const date = new Date(iso)
  return h('time', { datetime: iso, title: absolute(date), 'data-relative': when }, shown(date, when))
}

const shown = (date: Date, when: string) =>
  when === 'past' && date.getTime() > Date.now() ? 'just now' : relative(date)

/** Keeps every relative time on the page current. */
export function tickRelativeTimes() {
  for (const element of document.querySelectorAll<HTMLTimeElement>('time[data-relative]'))
    element.textContent = shown(new Date(element.dateTime), element.dataset.relative ?? 'past')
}

// Small pieces ------------------------------------------------------------------------------------

export type Tone = 'neutral' | 'good' | 'warn' | 'bad' | 'info'

export const badge = (label: string, tone: Tone = 'neutral') => h('span', { class: `badge ${tone}` }, label)

/** "DEAD_LETTER" or "dead_letter" → "Dead letter". */
export const humanize = (value: string) => {
  const words = value.replaceAll(/[_-]+/g, ' ').toLowerCase()
  return words.charAt(0).toUpperCase() + words.slice(1)
}

export const plural = (count: number, noun: string, nouns = `${noun}s`) =>
  `${count} ${count === 1 ? noun : nouns}`

export function bytes(size: number): string {
  if (size < 1024) return plural(size, 'byte')
  const units = ['KB', 'MB', 'GB']
  let value = size / 1024
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`
}

/** A short form of an id, the whole of it in the title. */
export const shortId = (id: string) =>
  h('code', { class: 'id', title: id }, id.length > 12 ? `${id.slice(0, 8)}…` : id)

export type ButtonVariant = 'primary' | 'secondary' | 'danger' | 'ghost'

export function button(
  label: string,
  onClick: (event: MouseEvent) => void,
  options: { variant?: ButtonVariant; small?: boolean; label?: string; type?: 'button' | 'submit' } = {},
) {
  return h(
    'button',
    {
      type: options.type ?? 'button',
      class: `btn ${options.variant ?? 'secondary'}${options.small ? ' small' : ''}`,
      'aria-label': options.label,
      onclick: onClick,
    },
    label,
  )
}

// Failures ----------------------------------------------------------------------------------------

/**
 * What went wrong, for a person: the problem's detail (else its title) and the catalogue's code; the
 * browser's own reason for a passkey ceremony, with its code.
 */
export function describeError(error: unknown): string {
  if (error instanceof PlatformError) {
    if (!error.problem)
      return error.status === 0
        ? 'The request did not reach the service. Check the connection and try again.'
        : 'The service gave an answer the console did not understand. Try again.'
    const fields = (error.problem as { errors?: { path: string; message: string }[] }).errors ?? []
    const detail = error.problem.detail ?? error.problem.title
    const extra =
      fields.length > 0 && !detail.includes(fields[0]?.message ?? '') ? ` ${fieldList(fields)}` : ''
    return `${detail}${extra} (${error.code})`
  }
  const failure = error as { code?: string; name?: string; message?: string } | null
  // The browser's own reason, when @simplewebauthn/browser passes it through unnamed.
  const code = failure?.code === 'ERROR_PASSTHROUGH_SEE_CAUSE_PROPERTY' ? failure.name : failure?.code
  const message = failure?.message ?? String(error)
  return code ? `${message} (${code})` : message
}

const fieldList = (fields: { path: string; message: string }[]) =>
  fields
    .map((field) => `${field.path.replace(/^(body|querystring|params)\./, '')} ${field.message}.`)
    .join(' ')

/** Runs `task`; its failure is shown in `alert` (cleared first), and reported as false. */
export async function guard(alert: HTMLElement, task: () => Promise<void>): Promise<boolean> {
  alert.textContent = ''
  try {
    await task()
    return true
  } catch (error) {
    alert.textContent = describeError(error)
    return false
  }
}

/** A role=alert paragraph, empty (and taking no room) until a failure is shown in it. */
export const alertBox = (id?: string) => h('p', { class: 'alert', role: 'alert', id })

/** Disables an element's buttons while `task` runs (no double submission); the fields keep focus. */
export async function busy<T>(element: HTMLElement, task: () => Promise<T>): Promise<T> {
  const controls = [...element.querySelectorAll('button')]
  const before = controls.map((control) => control.disabled)
  element.setAttribute('aria-busy', 'true')
  for (const control of controls) control.disabled = true
  try {
    return await task()
  } finally {
    element.removeAttribute('aria-busy')
    controls.forEach((control, i) => {
      control.disabled = before[i] ?? false
    })
  }
}

// Notices -----------------------------------------------------------------------------------------

/** A short confirmation in the page's status region ("API key revoked"), gone after a while. */
export function notify(message: string) {
  const region = document.getElementById('toast')
  if (!region) return
  const item = h('p', { class: 'toast-item' }, message)
  region.replaceChildren(item)
  setTimeout(() => item.remove(), 6000)
}

// Dialogs -----------------------------------------------------------------------------------------

/** A modal question; resolves true when the user confirms (Escape and Cancel are no). */
export function confirmDialog(options: {
  title: string
  message: Child
  confirm: string
  danger?: boolean
}): Promise<boolean> {
  return new Promise((resolve) => {
    const titleId = uid('dialog-title')
    const dialog = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': titleId },
      h(
        'form',
        { method: 'dialog' },
        h('h2', { id: titleId }, options.title),
        h('div', { class: 'dialog-body' }, options.message),
        h(
          'div',
          { class: 'actions end' },
          h('button', { class: 'btn secondary', value: 'cancel' }, 'Cancel'),
          h(
            'button',
            { class: `btn ${options.danger ? 'danger' : 'primary'}`, value: 'confirm' },
            options.confirm,
          ),
        ),
      ),
    )
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'confirm')
      dialog.remove()
    })
    document.body.append(dialog)
    dialog.showModal()
  })
}

/** Copies `value` to the clipboard; says in `status` whether it worked. */
export async function copyText(value: string, status: HTMLElement) {
  try {
    await navigator.clipboard.writeText(value)
    status.textContent = 'Copied to the clipboard.'
  } catch {
    status.textContent = 'The browser refused the clipboard: select the text and copy it.'
  }
}

/** A secret shown once (an API key, a signing secret), with a copy button; resolves when closed. */
export function secretDialog(options: { title: string; intro: Child; label: string; secret: string }) {
  return new Promise<void>((resolve) => {
    const titleId = uid('dialog-title')
    const fieldId = uid('secret')
    const status = h('p', { class: 'hint', role: 'status' })
    const field = h('input', {
      id: fieldId,
      class: 'secret',
      readonly: true,
      value: options.secret,
      spellcheck: 'false',
      autocomplete: 'off',
      onfocus: () => field.select(),
    })
    const dialog = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': titleId },
      h(
        'form',
        { method: 'dialog' },
        h('h2', { id: titleId }, options.title),
        h('div', { class: 'dialog-body' }, options.intro),
        h('label', { for: fieldId }, options.label),
        h(
          'div',
          { class: 'copy-row' },
          field,
          button('Copy', () => void copyText(options.secret, status), { variant: 'primary' }),
        ),
        status,
        h('div', { class: 'actions end' }, h('button', { class: 'btn secondary', value: 'done' }, 'Done')),
      ),
    )
    dialog.addEventListener('close', () => {
      dialog.remove()
      resolve()
    })
    document.body.append(dialog)
    dialog.showModal()
    field.focus()
  })
}

// Layout ------------------------------------------------------------------------------------------

/** A screen: its heading (focused when the screen opens), a sentence on what it is for, its cards. */
export const screen = (title: string, lede: Child, ...children: Child[]) =>
  h(
    'div',
    { class: 'screen' },
    h(
      'div',
      { class: 'page-head' },
      h('h1', { tabindex: '-1' }, title),
      lede ? h('p', { class: 'lede' }, lede) : null,
    ),
    ...children,
  )

/** A titled section of a screen; `actions` sit beside the title. */
export function card(
  options: { title: string; id?: string; actions?: Child; description?: Child },
  ...children: Child[]
) {
  const titleId = uid('card-title')
  return h(
    'section',
    { class: 'card', id: options.id, 'aria-labelledby': titleId },
    h(
      'div',
      { class: 'card-head' },
      h('h2', { id: titleId }, options.title),
      options.actions ? h('div', { class: 'card-actions' }, options.actions) : null,
    ),
    options.description ? h('p', { class: 'hint' }, options.description) : null,
    ...children,
  )
}

type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement

/** A labelled control, with a hint the control is described by. */
export function field(label: Child, control: Control, hint?: Child) {
  control.id ||= uid('field')
  const hintId = hint ? uid('hint') : undefined
  if (hintId) control.setAttribute('aria-describedby', hintId)
  return h(
    'div',
    { class: 'field' },
    h('label', { for: control.id }, label),
    control,
    hint ? h('p', { class: 'hint', id: hintId }, hint) : null,
  )
}

/** A field that takes the room left in its row. */
export const grow = (element: HTMLElement) => {
  element.classList.add('grow')
  return element
}

/** A select of `[value, label]` options. */
export const select = (name: string, options: [string, string][], value?: string) =>
  h(
    'select',
    { name, value },
    options.map(([optionValue, label]) => h('option', { value: optionValue }, label)),
  )

/** The form's value of `name` as trimmed text. */
export const fieldText = (form: HTMLFormElement, name: string) =>
  String(new FormData(form).get(name) ?? '').trim()

/** Submits through `task` (preventing the page's navigation), reporting failures in `alert`. */
export function onSubmit(
  form: HTMLFormElement,
  alert: HTMLElement,
  task: (event: SubmitEvent) => Promise<void>,
) {
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    void busy(form, () => guard(alert, () => task(event as SubmitEvent)))
  })
  return form
}
