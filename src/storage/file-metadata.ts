// What a client says about a file, made safe: the name is for display and Content-Disposition
// only (object keys never contain it), the media type is part of the upload signature.

export const MAX_FILE_NAME_LENGTH = 255
const FALLBACK_NAME = 'file'

// C0/C1 controls, line and paragraph separators, bidirectional overrides and isolates (which can
// make `gpj.exe` display as `exe.jpg`), and the byte-order mark.
const INVISIBLE = /[\p{Cc}\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/gu

/**
 * The original file name made safe to store, show and send back: the last path segment only, no
 * controls or double quotes, whitespace collapsed, no trailing dots, Unicode kept (NFC), at most
 * 255 characters with the extension kept. Never empty.
 */
export function sanitizeFileName(input: string): string {
  const cleaned = input.toWellFormed().normalize('NFC').replace(INVISIBLE, '')
  // Browsers on some systems send a full path (C:\fakepath\a.pdf); keep the last segment only.
  const lastSegment = cleaned.split(/[/\\]/).pop() ?? ''
  const name = lastSegment
    .replaceAll('"', '')
    .replace(/\s+/gu, ' ')
    .trim()
    .replace(/[. ]+$/u, '')
  if (name === '') return FALLBACK_NAME
  return truncate(name, MAX_FILE_NAME_LENGTH)
}

function truncate(name: string, max: number): string {
  const chars = [...name]
  if (chars.length <= max) return name
  const dot = name.lastIndexOf('.')
  const extension = dot > 0 ? [...name.slice(dot)] : []
  if (extension.length > 0 && extension.length <= 16) {
    return (
      chars
        .slice(0, max - extension.length)
        .join('')
        .trimEnd() + extension.join('')
    )
  }
  return chars.slice(0, max).join('').trimEnd()
}

/** RFC 5987 value-chars: percent-encoded UTF-8 except the attr-char set. */
function encodeExtValue(value: string): string {
  return encodeURIComponent(value).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

/**
 * `attachment` with an ASCII fallback `filename` and the exact name as RFC 6266 `filename*`
 * (UTF-8), so every browser saves the file under its original name and nothing is rendered inline.
 */
export function contentDisposition(fileName: string): string {
  const name = sanitizeFileName(fileName)
  const fallback = [...name].map((c) => (/^[\x20-\x7e]$/.test(c) && !'"\\%'.includes(c) ? c : '_')).join('')
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encodeExtValue(name)}`
}

const TOKEN = '[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}'
const MEDIA_TYPE = new RegExp(`^(${TOKEN})/(${TOKEN})$`)
const CHARSET = /^\s*charset\s*=\s*([A-Za-z0-9!#$%&'*+.^_`|~-]{1,40})\s*$/i

/**
 * A `type/subtype` media type with at most a charset parameter, in canonical form (lower case,
 * `; charset=` spelled one way), or null when it is anything else. The canonical form is what is
 * signed, so the client sends it back byte for byte (`uploadHeaders`).
 */
export function normalizeContentType(input: string): string | null {
  const [essence = '', ...parameters] = input.split(';')
  const match = MEDIA_TYPE.exec(essence.trim())
  if (!match) return null
  const type = `${match[1]}/${match[2]}`.toLowerCase()
  if (parameters.length === 0) return type
  if (parameters.length > 1) return null
  const charset = CHARSET.exec(parameters[0] ?? '')?.[1]
  return charset ? `${type}; charset=${charset.toLowerCase()}` : null
}
