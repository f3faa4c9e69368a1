import { sql } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  inTransaction,
  isDatabaseUnavailable,
  isUniqueViolation,
  mapUniqueViolation,
  openPostgres,
} from '../src/db/database.ts'
import { AppError } from '../src/errors.ts'
import { insertAccount } from '../src/features/accounts/repository.ts'
import { findOrganization, insertOrganization } from '../src/features/organizations/repository.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from './helpers/database.ts'

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

  it("turns a unique violation of the named index into the caller's error, and leaves any other as it is", async () => {
    const db = database.handle.db
    const organization = await insertOrganization(db, { name: 'Unique' })
    const account = (email: string) =>
      insertAccount(db, {
        organizationId: organization.id,
        email,
        passwordHash: 'x',
        role: 'member',
        active: true,
      })
    const exists = () => new AppError('ACCOUNT_EXISTS', 'taken')
    const first = await account('taken@example.com')

    // The email index is on lower(email): another letter case is the same address.
    const again = await mapUniqueViolation(() => account('TAKEN@example.com'), exists, 'accounts_email_key')
      .then(() => undefined)
      .catch((e: unknown) => e)
    expect(again).toBeInstanceOf(AppError)
    expect(again).toMatchObject({ code: 'ACCOUNT_EXISTS', status: 409 })

    // Another unique index (the primary key) is not the named one: its violation passes unchanged.
    const samePrimaryKey = () =>
      db
        .insertInto('accounts')
        .values({
          id: first.id,
          organization_id: organization.id,
          email: 'other@example.com',
          password_hash: 'x',
          role: 'member',
        })
        .execute()
    const other = await mapUniqueViolation(samePrimaryKey, exists, 'accounts_email_key').catch(
      (e: unknown) => e,
    )
    expect(other).not.toBeInstanceOf(AppError)
    expect(isUniqueViolation(other)).toBe(true)
    expect(isUniqueViolation(other, 'accounts_pkey')).toBe(true)
    expect(isUniqueViolation(other, 'accounts_email_key')).toBe(false)

    // Without a name, any unique violation is the caller's; other errors never are.
    await expect(mapUniqueViolation(samePrimaryKey, exists)).rejects.toMatchObject({ code: 'ACCOUNT_EXISTS' })
    const notUnique = await mapUniqueViolation(() => insertOrganization(db, { name: '' }), exists).catch(
      (e: unknown) => e,
    )
    expect(notUnique).not.toBeInstanceOf(AppError)
    expect(isUniqueViolation(notUnique)).toBe(false)
  })
})

describe.skipIf(!usingPostgres())('a connection the server ends', () => {
  it('is unavailable (503): the statement in flight, and any statement sent on the broken client after it', async () => {
    // What a server stop does to work in flight (test/reliability/postgres-restart.test.ts found
    // the second error, pg's "is not queryable" from the ROLLBACK of a transaction whose
    // connection had died, answering 500): the backend is terminated between two statements.
    const handle = openPostgres(database.url as string, { poolSize: 1, onIdleError: () => {} })
    const client = new pg.Client({ connectionString: database.url as string })
    client.on('error', () => {})
    try {
      const inFlight = await inTransaction(handle.db, async (trx) => {
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx)
        await sql`select pg_terminate_backend(${rows[0]?.pid})`.execute(database.handle.db)
        await sql`select 1`.execute(trx)
      }).catch((e: unknown) => e)
      expect(isDatabaseUnavailable(inFlight), String(inFlight)).toBe(true)

      await client.connect()
      const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid')
      await sql`select pg_terminate_backend(${rows[0]?.pid})`.execute(database.handle.db)
      // pg reports the break on the statements that meet it (here the termination notice or a
      // reset), then refuses every later one on that client.
      const errors: unknown[] = []
      for (let i = 0; i < 3; i++) errors.push(await client.query('select 1').catch((e: unknown) => e))
      const after = errors.at(-1)
      for (const error of errors) expect(isDatabaseUnavailable(error), String(error)).toBe(true)
      expect(String(after)).toMatch(/not queryable/)
      expect(isDatabaseUnavailable(after), String(after)).toBe(true)
    } finally {
      await client.end().catch(() => {})
      await handle.close()
    }
  })
})
