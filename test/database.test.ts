import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { inTransaction, isDatabaseUnavailable, openPostgres } from '../src/db/database.ts'
import { findOrganization, insertOrganization } from '../src/repositories/organizations.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

let database: TestDatabase
beforeAll(async () => {
  database = await createTestDatabase()
})
afterAll(async () => {
  await database.dispose()
})

describe('database', () => {
  it('commits the whole unit of work', async () => {
    const id = await inTransaction(
      database.handle.db,
      async (trx) => (await insertOrganization(trx, { name: 'Kept' })).id,
    )
    expect(await findOrganization(database.handle.db, id)).toMatchObject({ name: 'Kept' })
  })

  it('rolls the whole unit of work back when any step fails', async () => {
    let insertedId: string | undefined
    await expect(
      inTransaction(database.handle.db, async (trx) => {
        insertedId = (await insertOrganization(trx, { name: 'Rolled back' })).id
        await insertOrganization(trx, { name: '' }) // violates the name check
      }),
    ).rejects.toThrow()
    expect(insertedId).toBeDefined()
    expect(await findOrganization(database.handle.db, insertedId as string)).toBeUndefined()
  })

  it('never shows the work of a transaction that rolled back', async () => {
    const inserted = Promise.withResolvers<void>()
    const gate = Promise.withResolvers<void>()
    const transaction = inTransaction(database.handle.db, async (trx) => {
      await insertOrganization(trx, { name: 'Uncommitted' })
      inserted.resolve()
      await gate.promise
      throw new Error('roll back')
    })
    await inserted.promise
    // Issued while the transaction is open: on PGlite (one connection) it must queue behind the
    // transaction rather than run inside it; on PostgreSQL it runs on another connection.
    const outside = database.handle.db
      .selectFrom('organizations')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('name', '=', 'Uncommitted')
      .executeTakeFirstOrThrow()
    gate.resolve()
    await expect(transaction).rejects.toThrow('roll back')
    expect((await outside).n).toBe('0')
  })

  it('returns int8 values as strings on both drivers', async () => {
    const { rows } = await sql<{ n: unknown }>`select count(*) as n from organizations`.execute(
      database.handle.db,
    )
    expect(typeof rows[0]?.n).toBe('string')
  })

  it('classifies an unreachable server as unavailable and a bad query as not', async () => {
    const unreachable = openPostgres('postgres://postgres@127.0.0.1:1/none', { poolSize: 1 })
    const error = await sql`select 1`.execute(unreachable.db).catch((e: unknown) => e)
    await unreachable.close()
    expect(isDatabaseUnavailable(error)).toBe(true)
    const bad = await sql`select * from no_such_table`.execute(database.handle.db).catch((e: unknown) => e)
    expect(isDatabaseUnavailable(bad)).toBe(false)
  })
})
