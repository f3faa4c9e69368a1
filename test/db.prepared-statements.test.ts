import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type DatabaseHandle, inTransaction, openDatabase, openPostgres } from '../src/db/database.ts'
import { testConfig } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from './helpers/database.ts'

// On PostgreSQL each distinct parameterized statement is prepared once per connection (a named
// statement), so the server parses and plans it once. One connection here, so every statement of
// a test meets the statements its earlier ones prepared.

const preparedTexts = async (handle: DatabaseHandle): Promise<string[]> =>
  (
    await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(handle.db)
  ).rows.map((row) => row.statement)

describe.skipIf(!usingPostgres())('prepared statements on PostgreSQL', () => {
  let database: TestDatabase
  let handle: DatabaseHandle
  let other: DatabaseHandle

  beforeAll(async () => {
    database = await createTestDatabase({ poolSize: 1 })
    handle = database.handle
    other = openPostgres(database.url as string, { poolSize: 1 })
  })
  afterAll(async () => {
    await other?.close()
    await database?.dispose()
  })

  it('prepares a parameterized statement once on a connection and binds new values to it', async () => {
    const first = await sql<{ n: number }>`select ${1}::int + 1 as n`.execute(handle.db)
    const second = await sql<{ n: number }>`select ${41}::int + 1 as n`.execute(handle.db)
    expect([first.rows[0]?.n, second.rows[0]?.n]).toEqual([2, 42])
    const texts = await preparedTexts(handle)
    expect(texts.filter((text) => text === 'select $1::int + 1 as n')).toHaveLength(1)
  })

  it('runs a select * again after a migration adds a column under it, outside and inside a transaction', async () => {
    await sql`create table widgets (id int primary key, name text)`.execute(other.db)
    await sql`insert into widgets values (1, 'one')`.execute(other.db)
    const read = () => sql<Record<string, unknown>>`select * from widgets where id = ${1}`
    expect((await read().execute(handle.db)).rows).toEqual([{ id: 1, name: 'one' }])

    await sql`alter table widgets add column colour text`.execute(other.db)
    expect((await read().execute(handle.db)).rows).toEqual([{ id: 1, name: 'one', colour: null }])

    await sql`alter table widgets add column size int`.execute(other.db)
    const inside = await inTransaction(handle.db, async (trx) => (await read().execute(trx)).rows)
    expect(inside).toEqual([{ id: 1, name: 'one', colour: null, size: null }])
  })

  it('parses a statement that failed again next time instead of naming a statement that does not exist', async () => {
    const read = () => sql<{ n: number }>`select n from gadgets where n = ${7}`
    for (let attempt = 0; attempt < 2; attempt++) {
      await expect(read().execute(handle.db)).rejects.toMatchObject({ code: '42P01' })
    }
    await sql`create table gadgets (n int)`.execute(other.db)
    await sql`insert into gadgets values (7)`.execute(other.db)
    expect((await read().execute(handle.db)).rows).toEqual([{ n: 7 }])
  })

  it('names nothing with platform.datasource.prepared-statements=false (for a pooler that does not keep them)', async () => {
    const open = (value: string) =>
      openDatabase(
        testConfig({
          'platform.datasource.url': database.url as string,
          'platform.datasource.pool-size': '1',
          'platform.datasource.prepared-statements': value,
        }),
      )
    for (const [value, expected] of [
      ['false', []],
      ['true', ['select $1::int as n']],
    ] as const) {
      const opened = await open(value)
      try {
        await sql`select ${1}::int as n`.execute(opened.db)
        await sql`select ${2}::int as n`.execute(opened.db)
        expect(await preparedTexts(opened)).toEqual(expected)
      } finally {
        await opened.close()
      }
    }
  })
})
