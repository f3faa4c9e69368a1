import { Type } from '@sinclair/typebox'

// One definition of an id: the schema that paths and bodies declare, and the check for code that
// takes an id from elsewhere (a cursor, a token's claim, a CLI argument) before it reaches a uuid
// column, where anything else would be a data error.

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Whether `value` is a UUID in its hyphenated text form (any case). */
export const isUuid = (value: string): boolean => UUID.test(value)

/** An id in a path, query or body. */
export const Uuid = Type.String({ format: 'uuid' })
