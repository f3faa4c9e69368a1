import { validationFailed } from '../errors.ts'
import { isUuid } from '../uuid.ts'

// The opaque cursor of lists paged by (creation time, id): base64url of `[ISO time, id]`. Only a
// cursor exactly as this API wrote it is accepted; anything else is 400 VALIDATION_FAILED on
// `querystring.cursor`, never a query with a value PostgreSQL would refuse.

export interface KeysetKey {
  createdAt: Date
  id: string
}

export const encodeKeysetCursor = (key: KeysetKey): string =>
  Buffer.from(JSON.stringify([key.createdAt.toISOString(), key.id])).toString('base64url')

/**
 * Whether a cursor's time can be one this API wrote, from a stored creation time: years 1 to 9999.
 * A Date reaches ±275760 years; PostgreSQL (and PGlite) refuse most of that range as out of range.
 */
const storable = (date: Date) => date.getUTCFullYear() >= 1 && date.getUTCFullYear() <= 9999

export function decodeKeysetCursor(cursor: string): KeysetKey {
  try {
    const [createdAt, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as [string, string]
    const date = new Date(createdAt)
    // Ids are written in lower case; the text comparison of the keyset would not match another.
    if (typeof id !== 'string' || !isUuid(id) || id !== id.toLowerCase() || !storable(date)) throw new Error()
    const key = { createdAt: date, id }
    if (encodeKeysetCursor(key) !== cursor) throw new Error()
    return key
  } catch {
    throw validationFailed(
      'querystring.cursor',
      'is not a valid cursor',
      'The cursor is not one this API returned',
    )
  }
}
