import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import type { PDFDocument, PDFFont, PDFPage } from 'pdf-lib'

// The one-page PDF summary of a purchase request (POST .../report). Rendering only: the
// caller gathers the data (display names already resolved, times from the injected clock) and
// stores the bytes.
//
// Fonts: DejaVu Sans (package `dejavu-fonts-ttf`) is embedded as a subset, so Latin, Greek and
// Cyrillic, among others, are drawn and extracted as they are. What it has no glyph for (CJK,
// emoji, ...) is degraded, never a failure: each user-perceived character (grapheme) containing a
// code point the font lacks is drawn as '?', and invisible format characters it lacks (variation
// selectors, zero-width joiners) are dropped.
//
// One page always: a title longer than TITLE_MAX_LINES lines ends with '…'; single-line values
// are cut with '…' at their column's width; the history and attachment lists share the room left
// and end with "… and N more" when they do not fit.

export interface ReportHistoryEntry {
  action: string
  fromStatus: string
  toStatus: string
  /** Display name of the actor: an account's email, or the principal id. */
  actor: string
  occurredAt: Date
}

export interface PurchaseRequestReportData {
  id: string
  title: string
  status: string
  /** Display name of the creator: an account's email, or the principal id. */
  creator: string
  createdAt: Date
  updatedAt: Date
  /** Oldest first. */
  history: ReportHistoryEntry[]
  /** File names of the request's confirmed attachments, oldest first. */
  attachments: string[]
  generatedAt: Date
}

export const REPORT_CONTENT_TYPE = 'application/pdf'
export const reportFileName = (id: string) => `purchase-request-${id}.pdf`

export const TITLE_MAX_LINES = 6

// A4 in points (pdf-lib's PageSizes.A4).
const [PAGE_WIDTH, PAGE_HEIGHT] = [595.28, 841.89]
const MARGIN = 56
const CONTENT_WIDTH = PAGE_WIDTH - 2 * MARGIN

const HEADING = { size: 20, lineHeight: 30 }
const TITLE = { size: 14, lineHeight: 18 }
const FIELD = { size: 10, lineHeight: 15, labelWidth: 90 }
const SECTION = { size: 12, before: 12, after: 18 }
const ROW = { size: 9, lineHeight: 13 }
const FOOTER = { size: 8, height: 20 }
const HISTORY_COLUMNS = [
  { label: 'Time', width: 142 },
  { label: 'Action', width: 58 },
  { label: 'From → To', width: 130 },
  { label: 'Actor', width: CONTENT_WIDTH - 142 - 58 - 130 },
]

interface Toolkit {
  pdf: typeof import('pdf-lib')
  fontkit: Parameters<PDFDocument['registerFontkit']>[0]
  regular: Uint8Array
  bold: Uint8Array
}

// The PDF libraries and the font files are loaded on the first report, not when the app starts
// (they add a noticeable share to the start-up of every process, the CLI's included), then kept:
// the fonts are static assets. A failed load is tried again on the next report.
let toolkit: Promise<Toolkit> | undefined

function loadToolkit(): Promise<Toolkit> {
  if (!toolkit) {
    const require = createRequire(import.meta.url)
    const read = (file: string) => readFile(require.resolve(`dejavu-fonts-ttf/ttf/${file}`))
    toolkit = Promise.all([
      import('pdf-lib'),
      import('@pdf-lib/fontkit'),
      read('DejaVuSans.ttf'),
      read('DejaVuSans-Bold.ttf'),
    ]).then(([pdf, fontkit, regular, bold]) => ({ pdf, fontkit: fontkit.default, regular, bold }))
    toolkit.catch(() => {
      toolkit = undefined
    })
  }
  return toolkit
}

/** An embedded font with the code points it covers. */
interface Face {
  font: PDFFont
  covers: ReadonlySet<number>
}

const graphemes = new Intl.Segmenter('en', { granularity: 'grapheme' })
const IGNORABLE = /\p{Default_Ignorable_Code_Point}/u
const WHITESPACE = /[\s\p{Cc}]+/gu

/**
 * The text as the face can draw it: one line, NFC, each grapheme with a code point the font lacks
 * replaced by '?', uncovered invisible format characters dropped.
 */
function drawable(text: string, covers: ReadonlySet<number>): string {
  const normalized = text.toWellFormed().normalize('NFC').replace(WHITESPACE, ' ')
  let out = ''
  for (const { segment } of graphemes.segment(normalized)) {
    let kept = ''
    let missing = false
    for (const char of segment) {
      const codePoint = char.codePointAt(0) ?? 0
      if (covers.has(codePoint)) kept += char
      else if (!IGNORABLE.test(char)) missing = true
    }
    out += missing ? '?' : kept
  }
  return out
}

const width = (face: Face, text: string, size: number) => face.font.widthOfTextAtSize(text, size)

/** The drawable text cut to `maxWidth`, ending with '…' when it was cut. */
function fitLine(face: Face, text: string, size: number, maxWidth: number): string {
  const clean = drawable(text, face.covers)
  if (width(face, clean, size) <= maxWidth) return clean
  const parts = [...graphemes.segment(clean)].map((s) => s.segment)
  // Binary search for the longest prefix that fits with the ellipsis.
  let low = 0
  let high = parts.length
  while (low < high) {
    const mid = Math.ceil((low + high) / 2)
    if (width(face, `${parts.slice(0, mid).join('').trimEnd()}…`, size) <= maxWidth) low = mid
    else high = mid - 1
  }
  return `${parts.slice(0, low).join('').trimEnd()}…`
}

/** Word-wrapped lines of at most `maxWidth`; a word wider than a line is broken between graphemes. */
function wrap(face: Face, text: string, size: number, maxWidth: number, maxLines: number): string[] {
  const words = drawable(text, face.covers).split(' ').filter(Boolean)
  const lines: string[] = []
  let line = ''
  for (const word of words) {
    const candidate = line ? `${line} ${word}` : word
    if (width(face, candidate, size) <= maxWidth) {
      line = candidate
      continue
    }
    if (line) lines.push(line)
    line = ''
    for (const { segment } of graphemes.segment(word)) {
      if (line && width(face, line + segment, size) > maxWidth) {
        lines.push(line)
        line = ''
      }
      line += segment
    }
  }
  if (line) lines.push(line)
  if (lines.length <= maxLines) return lines
  const kept = lines.slice(0, maxLines - 1)
  // The last line carries as much of the rest as fits, then '…'.
  kept.push(fitLine(face, lines.slice(maxLines - 1).join(' '), size, maxWidth))
  return kept
}

/**
 * How many rows each list may show in `rows` rows. Each list needs at least one row ("None" when
 * empty); the attachments keep at least a third of the room when both overflow.
 */
function shareRows(rows: number, history: number, attachments: number): [number, number] {
  const h = Math.max(1, history)
  const a = Math.max(1, attachments)
  if (h + a <= rows) return [h, a]
  const attachmentRows = Math.max(1, Math.min(a, Math.max(Math.floor(rows / 3), rows - h)))
  return [Math.max(1, rows - attachmentRows), attachmentRows]
}

/** The items to show in `rows` rows: all of them, or `rows - 1` and a "… and N more" line. */
function truncated<T>(items: T[], rows: number): { shown: T[]; more: number } {
  if (items.length <= rows) return { shown: items, more: 0 }
  const shown = items.slice(0, Math.max(0, rows - 1))
  return { shown, more: items.length - shown.length }
}

/** Renders the report: A4, exactly one page, text fonts embedded as subsets. */
export async function renderPurchaseRequestReport(data: PurchaseRequestReportData): Promise<Uint8Array> {
  const { pdf, fontkit, ...files } = await loadToolkit()
  const TEXT = pdf.rgb(0.1, 0.1, 0.1)
  const MUTED = pdf.rgb(0.4, 0.4, 0.4)
  const doc = await pdf.PDFDocument.create()
  doc.registerFontkit(fontkit)
  // Ligatures off: each drawn glyph maps back to one character, so copied and extracted text is exact.
  const embed = async (bytes: Uint8Array): Promise<Face> => {
    const font = await doc.embedFont(bytes, { subset: true, features: { liga: false, clig: false } })
    return { font, covers: new Set(font.getCharacterSet()) }
  }
  const regular = await embed(files.regular)
  const bold = await embed(files.bold)

  doc.setTitle(`Purchase request: ${data.title.toWellFormed()}`)
  doc.setSubject(`Purchase request ${data.id}`)
  doc.setCreator('platform-core')
  doc.setProducer('platform-core')
  doc.setCreationDate(data.generatedAt)
  doc.setModificationDate(data.generatedAt)

  const page: PDFPage = doc.addPage([PAGE_WIDTH, PAGE_HEIGHT])
  let y = PAGE_HEIGHT - MARGIN
  const draw = (text: string, x: number, face: Face, size: number, color = TEXT) => {
    page.drawText(text, { x: MARGIN + x, y, size, font: face.font, color })
  }

  y -= HEADING.size
  draw('Purchase request', 0, bold, HEADING.size)
  y -= HEADING.lineHeight - HEADING.size + TITLE.size

  for (const line of wrap(bold, data.title, TITLE.size, CONTENT_WIDTH, TITLE_MAX_LINES)) {
    draw(line, 0, bold, TITLE.size)
    y -= TITLE.lineHeight
  }
  y -= FIELD.lineHeight - FIELD.size

  const fields: [string, string][] = [
    ['Status', data.status],
    ['Creator', data.creator],
    ['Created', data.createdAt.toISOString()],
    ['Updated', data.updatedAt.toISOString()],
    ['Request id', data.id],
  ]
  for (const [label, value] of fields) {
    draw(label, 0, bold, FIELD.size, MUTED)
    const valueWidth = CONTENT_WIDTH - FIELD.labelWidth
    draw(fitLine(regular, value, FIELD.size, valueWidth), FIELD.labelWidth, regular, FIELD.size)
    y -= FIELD.lineHeight
  }

  // How many list rows fit above the footer band: the room below the fields less both section
  // headings and the history's column header (the last row needs no gap below its baseline).
  const bottom = MARGIN + FOOTER.height
  const headings = 2 * (SECTION.before + SECTION.after)
  const rows = Math.max(2, Math.floor((y - headings - bottom) / ROW.lineHeight))
  const [historyRows, attachmentRows] = shareRows(rows, data.history.length, data.attachments.length)

  const section = (heading: string) => {
    y -= SECTION.before
    draw(heading, 0, bold, SECTION.size)
    y -= SECTION.after
  }
  const moreLine = (more: number) => {
    draw(`… and ${more} more`, 0, regular, ROW.size, MUTED)
    y -= ROW.lineHeight
  }

  section('History')
  const row = (cells: string[], face: Face, color = TEXT) => {
    let x = 0
    HISTORY_COLUMNS.forEach((column, i) => {
      draw(fitLine(face, cells[i] ?? '', ROW.size, column.width - 6), x, face, ROW.size, color)
      x += column.width
    })
    y -= ROW.lineHeight
  }
  row(
    HISTORY_COLUMNS.map((c) => c.label),
    bold,
    MUTED,
  )
  if (data.history.length === 0) {
    draw('No transitions yet', 0, regular, ROW.size, MUTED)
    y -= ROW.lineHeight
  }
  const history = truncated(data.history, historyRows)
  for (const entry of history.shown) {
    row(
      [entry.occurredAt.toISOString(), entry.action, `${entry.fromStatus} → ${entry.toStatus}`, entry.actor],
      regular,
    )
  }
  if (history.more > 0) moreLine(history.more)

  section('Attachments')
  if (data.attachments.length === 0) {
    draw('None', 0, regular, ROW.size, MUTED)
    y -= ROW.lineHeight
  }
  const attachments = truncated(data.attachments, attachmentRows)
  for (const name of attachments.shown) {
    draw(fitLine(regular, `• ${name}`, ROW.size, CONTENT_WIDTH), 0, regular, ROW.size)
    y -= ROW.lineHeight
  }
  if (attachments.more > 0) moreLine(attachments.more)

  y = MARGIN
  draw(`Generated at ${data.generatedAt.toISOString()}`, 0, regular, FOOTER.size, MUTED)

  return doc.save()
}
