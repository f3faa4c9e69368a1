import { Type } from '@sinclair/typebox'
import { validationFailed } from '../errors.ts'
import { isUuid } from '../uuid.ts'

// Keyset paging, one way for every list. A page is read with one row more than it shows
// (`rowsToRead`): that row tells whether another page follows (`page`), which then starts after the
// last shown row's position in the list's order. The position travels as an opaque cursor
// (`cursorCodec`): base64url of the JSON array `[list, ...values]`. Only a cursor exactly as its own
// list wrote it is accepted; garbage, another list's cursor, or a value edited into another type or
// into one PostgreSQL would refuse is 400 VALIDATION_FAILED on `querystring.cursor`, thrown before
// any statement runs. Cursors are not signed: every list filters by the caller's organization in its
// query, so a position edited into another valid one only moves where a page of that list starts.

/** The `cursor` query parameter of every paged list. */
export const Cursor = Type.String({
  minLength: 1,
  // An email of 320 characters, up to 4 bytes each, with the list's name, in base64url.
  maxLength: 2000,
  pattern: '^[A-Za-z0-9_-]+$',
  description: 'nextCursor of the previous page',
})

/** A page of a list, and the position of its last row when another page follows. */
export interface Page<Row, Key> {
  items: Row[]
  next: Key | null
}

/** How many rows to read for a page of `limit`: the one more tells whether another page follows. */
export const rowsToRead = (limit: number): number => limit + 1

/** The page of `rows`, read with `rowsToRead(limit)`; `keyOf` gives a row's position in the order. */
export function page<Row, Key>(
  rows: readonly Row[],
  limit: number,
  keyOf: (row: Row) => Key,
): Page<Row, Key> {
  const items = rows.slice(0, limit)
  const last = items.at(-1)
  return { items, next: rows.length > limit && last !== undefined ? keyOf(last) : null }
}

/** Whether a Date is of a year PostgreSQL stores (1 to 9999); a Date reaches ±275760. */
const storable = (date: Date) =>
  !Number.isNaN(date.getTime()) && date.getUTCFullYear() >= 1 && date.getUTCFullYear() <= 9999

const INT8_MAX = 2n ** 63n - 1n

const CONTROL_CHARACTERS = /\p{Cc}/u

/**
 * The kinds of value a position holds: how each is written into a cursor, and read back (undefined
 * for a value its column could not hold, so that it never reaches the database as a data error).
 */
const PARTS = {
  /** A timestamp as Date.toISOString() writes it: the millisecond a driver's Date holds. */
  instant: {
    write: (value: Date): unknown => value.toISOString(),
    read(value: unknown): Date | undefined {
      if (typeof value !== 'string') return undefined
      const date = new Date(value)
      return storable(date) && date.toISOString() === value ? date : undefined
    },
  },
  /** An id in lower case, as the database writes ids; the keyset compares them as text. */
  uuid: {
    write: (value: string): unknown => value,
    read: (value: unknown): string | undefined =>
      typeof value === 'string' && isUuid(value) && value === value.toLowerCase() ? value : undefined,
  },
  /** Text compared in the database: well-formed, without control characters (PostgreSQL refuses NUL). */
  text: {
    write: (value: string): unknown => value,
    read: (value: unknown): string | undefined =>
      typeof value === 'string' && value.isWellFormed() && !CONTROL_CHARACTERS.test(value)
        ? value
        : undefined,
  },
  /** A positive int8 (a bigserial, a sequence) in its decimal text, as the driver reads one. */
  serial: {
    write: (value: string): unknown => value,
    read: (value: unknown): string | undefined =>
      typeof value === 'string' && /^[1-9][0-9]{0,18}$/.test(value) && BigInt(value) <= INT8_MAX
        ? value
        : undefined,
  },
} as const

type Part = keyof typeof PARTS
type PartValue<P extends Part> = P extends 'instant' ? Date : string

/** The position a cursor of a list holds: one named value per column of its order. */
export type KeyOf<Shape extends Record<string, Part>> = { [Name in keyof Shape]: PartValue<Shape[Name]> }

/** The opaque cursors of one list. */
export interface CursorCodec<Key> {
  encode(key: Key): string
  /** The position of a cursor this codec wrote; anything else throws 400 VALIDATION_FAILED. */
  decode(cursor: string): Key
}

/** The key type of a codec, for the repository whose order it holds. */
export type CursorKey<Codec> = Codec extends CursorCodec<infer Key> ? Key : never

const invalidCursor = () =>
  validationFailed('querystring.cursor', 'is not a valid cursor', 'The cursor is not one this API returned')

/**
 * The cursors of the list named `list` (unique among the lists: it is what tells one list's cursor
 * from another's of the same shape), ordered by the columns `shape` names, in its order.
 */
export function cursorCodec<const Shape extends Record<string, Part>>(
  list: string,
  shape: Shape,
): CursorCodec<KeyOf<Shape>> {
  const names = Object.keys(shape) as (keyof Shape & string)[]
  const partOf = (name: keyof Shape & string) => PARTS[shape[name] as Part]

  const encode = (key: KeyOf<Shape>): string => {
    const values = names.map((name) => (partOf(name).write as (value: unknown) => unknown)(key[name]))
    return Buffer.from(JSON.stringify([list, ...values])).toString('base64url')
  }

  function read(cursor: string): KeyOf<Shape> | undefined {
    let array: unknown
    try {
      array = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    } catch {
      return undefined
    }
    if (!Array.isArray(array) || array.length !== names.length + 1 || array[0] !== list) return undefined
    const key: Record<string, unknown> = {}
    for (const [index, name] of names.entries()) {
      const value = partOf(name).read(array[index + 1])
      if (value === undefined) return undefined
      key[name] = value
    }
    return key as KeyOf<Shape>
  }

  return {
    encode,
    decode(cursor) {
      const key = read(cursor)
      // Base64url decoding skips characters it does not know, and JSON has many spellings of one
      // array: only the one this codec writes is a cursor.
      if (key === undefined || encode(key) !== cursor) throw invalidCursor()
      return key
    },
  }
}
