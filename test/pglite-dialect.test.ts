import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { setImmediate as nextMacrotask } from 'node:timers/promises'
import { sql } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type DatabaseHandle, openPGlite } from '../src/db/database.ts'
import { holderAddress } from '../src/db/embedded-holder.ts'

// The embedded database through Kysely's own PGlite dialect: one connection, handed to one holder
// at a time, and shared with the other processes the holder serves it to without either running
// inside the other's transaction.

let handle: DatabaseHandle
const db = () => handle.db

beforeAll(async () => {
  handle = await openPGlite()
  await sql`create table probe (n int)`.execute(db())
})
afterAll(async () => {
  await handle?.close()
})

describe('PGlite through Kysely', () => {
  it('hands its single connection to one holder at a time, in order', async () => {
    const order: string[] = []
    const first = Promise.withResolvers<void>()
    const holding = db()
      .connection()
      .execute(async () => {
        order.push('first')
        await first.promise
      })
    await nextMacrotask()
    const others = ['second', 'third'].map((name) =>
      db()
        .connection()
        .execute(async () => {
          order.push(name)
        }),
    )
    // Every microtask has run by the next macrotask: a free connection would have been handed out.
    await nextMacrotask()
    expect(order).toEqual(['first'])
    first.resolve()
    await Promise.all([holding, ...others])
    expect(order).toEqual(['first', 'second', 'third'])
  })

  it('runs a statement issued during a transaction after its commit, not inside it', async () => {
    await sql`delete from probe`.execute(db())
    const inside = Promise.withResolvers<void>()
    const gate = Promise.withResolvers<void>()
    const transaction = db()
      .transaction()
      .execute(async (trx) => {
        await sql`insert into probe values (1)`.execute(trx)
        inside.resolve()
        await gate.promise
        await sql`insert into probe values (2)`.execute(trx)
      })
    await inside.promise
    const counted = sql<{ n: number }>`select count(*)::int as n from probe`.execute(db())
    await nextMacrotask()
    gate.resolve()
    await transaction
    expect((await counted).rows).toEqual([{ n: 2 }])
  })

  it('rolls back to a savepoint', async () => {
    await sql`delete from probe`.execute(db())
    const trx = await db().startTransaction().execute()
    await sql`insert into probe values (1)`.execute(trx)
    const savepoint = await trx.savepoint('before_two').execute()
    await sql`insert into probe values (2)`.execute(savepoint)
    await savepoint.rollbackToSavepoint('before_two').execute()
    await trx.commit().execute()
    expect((await sql<{ n: number }>`select n from probe`.execute(db())).rows).toEqual([{ n: 1 }])
  })

  it('reports a failing statement with its SQLSTATE and goes on answering', async () => {
    const error = await sql`select 1 / 0`.execute(db()).catch((caught: unknown) => caught)
    expect(error).toMatchObject({ code: '22012' })
    await expect(
      db()
        .transaction()
        .execute(async (trx) => {
          await sql`insert into probe values (1)`.execute(trx)
          await sql`select 1 / 0`.execute(trx)
        }),
    ).rejects.toMatchObject({ code: '22012' })
    expect((await sql<{ one: number }>`select 1 as one`.execute(db())).rows).toEqual([{ one: 1 }])
  })
})

describe('the embedded holder', () => {
  let directory: string
  beforeAll(async () => {
    directory = await mkdtemp(path.join(tmpdir(), 'pglite-holder-'))
  })
  afterAll(async () => {
    await rm(directory, { recursive: true, force: true })
  })

  it("never runs another process's statement inside its own open transaction", async () => {
    const held = await openPGlite(path.join(directory, 'pglite'))
    const client = new pg.Client({
      connectionString: `postgres://postgres@127.0.0.1:${(await holderAddress(path.join(directory, 'pglite'))).port}/postgres`,
    })
    try {
      await sql`create table probe (n int)`.execute(held.db)
      await client.connect()
      const inside = Promise.withResolvers<void>()
      const gate = Promise.withResolvers<void>()
      const rolledBack = held.db
        .transaction()
        .execute(async (trx) => {
          await sql`insert into probe values (1)`.execute(trx)
          inside.resolve()
          await gate.promise
          throw new Error('roll back')
        })
        .catch(() => undefined)
      await inside.promise
      // Another process (the CLI beside the server) writes while the holder's transaction is open.
      const written = client.query('insert into probe values (2)')
      await new Promise((resolve) => setTimeout(resolve, 200))
      gate.resolve()
      await rolledBack
      await written
      // Its insert was a transaction of its own: the holder's rollback leaves it.
      expect((await sql<{ n: number }>`select n from probe`.execute(held.db)).rows).toEqual([{ n: 2 }])
    } finally {
      await client.end()
      await held.close()
    }
  })
})
