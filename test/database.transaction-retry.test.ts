import { sql } from 'kysely'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { inTransaction, TRANSACTION_ATTEMPTS } from '../src/db/database.ts'
import type { Tx } from '../src/db/schema.ts'
import { AppError } from '../src/errors.ts'
import { insertOrganization } from '../src/features/organizations/repository.ts'
import { createTestDatabase, type TestDatabase, usingPostgres } from './helpers/database.ts'

// A unit of work aborted by a serialization failure (SQLSTATE 40001) or a deadlock (40P01) is run
// again as a whole, a bounded number of times, then answers 503 SERVICE_UNAVAILABLE. On both
// databases the server itself raises the error inside a real transaction; on PostgreSQL, two real
// transactions also deadlock and break serializability, coordinated step by step.

let database: TestDatabase
const db = () => database.handle.db

beforeAll(async () => {
  database = await createTestDatabase()
})

afterAll(async () => {
  await database?.dispose()
})

beforeEach(async () => {
  await db().deleteFrom('organizations').where('name', 'like', 'retry-%').execute()
})

/** The server aborts the statement with this SQLSTATE, as it does when a concurrent transaction wins. */
const abortWith = (trx: Tx, sqlstate: string) =>
  sql`do $$ begin raise exception 'conflict (test)' using errcode = ${sql.lit(sqlstate)}; end $$`.execute(trx)

const namesLike = async (pattern: string) =>
  (await db().selectFrom('organizations').select('name').where('name', 'like', pattern).execute())
    .map((row) => row.name)
    .sort()

/** Resolves once `parties` callers have arrived. */
function barrier(parties: number): () => Promise<void> {
  let arrived = 0
  const all = Promise.withResolvers<void>()
  return () => {
    arrived++
    if (arrived === parties) all.resolve()
    return all.promise
  }
}

describe('transaction retry', () => {
  it.each([
    ['a serialization failure', '40001'],
    ['a deadlock', '40P01'],
  ])('runs a unit of work aborted by %s again, as a whole, until it commits', async (_, sqlstate) => {
    let attempts = 0
    const result = await inTransaction(db(), async (trx) => {
      attempts++
      await insertOrganization(trx, { name: `retry-${sqlstate}-${attempts}` })
      if (attempts < TRANSACTION_ATTEMPTS) await abortWith(trx, sqlstate)
      return 'done'
    })
    expect(result).toBe('done')
    expect(attempts).toBe(TRANSACTION_ATTEMPTS)
    // The aborted attempts were rolled back: only the last one's row is there.
    expect(await namesLike(`retry-${sqlstate}-%`)).toEqual([`retry-${sqlstate}-${TRANSACTION_ATTEMPTS}`])
  })

  it(`answers 503 SERVICE_UNAVAILABLE after ${TRANSACTION_ATTEMPTS} attempts of a unit of work that keeps conflicting`, async () => {
    let attempts = 0
    const failure = await inTransaction(db(), async (trx) => {
      attempts++
      await insertOrganization(trx, { name: `retry-always-${attempts}` })
      await abortWith(trx, '40001')
    }).then(
      () => null,
      (error: unknown) => error,
    )
    expect(attempts).toBe(TRANSACTION_ATTEMPTS)
    expect(failure).toBeInstanceOf(AppError)
    expect(failure).toMatchObject({ code: 'SERVICE_UNAVAILABLE', status: 503 })
    expect((failure as AppError).headers['retry-after']).toBe('1')
    expect(((failure as AppError).cause as { code?: string }).code).toBe('40001')
    expect(await namesLike('retry-always-%')).toEqual([])
  })

  it('does not run a unit of work again for any other failure', async () => {
    let attempts = 0
    const failure = await inTransaction(db(), async (trx) => {
      attempts++
      await insertOrganization(trx, { name: 'retry-once' })
      await insertOrganization(trx, { name: '' }) // violates the name check (23514)
    }).then(
      () => null,
      (error: unknown) => error,
    )
    expect(attempts).toBe(1)
    expect(failure).not.toBeInstanceOf(AppError)
    expect((failure as { code?: string }).code).toBe('23514')
    expect(await namesLike('retry-once')).toEqual([])
  })

  // PGlite is one connection: two transactions cannot be open at once there.
  describe('between real concurrent transactions (PostgreSQL)', () => {
    it.runIf(usingPostgres())(
      'lets both of two transactions that deadlock commit: the one the server aborts runs again',
      async () => {
        const [a, b] = await Promise.all([
          insertOrganization(db(), { name: 'retry-row-a' }),
          insertOrganization(db(), { name: 'retry-row-b' }),
        ])
        const bothHoldOne = barrier(2)
        const attempts = { first: 0, second: 0 }
        const conflicts: string[] = []
        /** Locks `one`, then (on its first attempt once the other holds its row) `other`. */
        const lockInOrder = (who: 'first' | 'second', one: string, other: string) =>
          inTransaction(db(), async (trx) => {
            const attempt = ++attempts[who]
            const rename = (id: string) =>
              trx
                .updateTable('organizations')
                .set({ name: `retry-${who}-${id === a.id ? 'a' : 'b'}` })
                .where('id', '=', id)
                .execute()
            await rename(one)
            if (attempt === 1) await bothHoldOne()
            try {
              await rename(other)
            } catch (error) {
              conflicts.push((error as { code?: string }).code ?? String(error))
              throw error
            }
            return attempt
          })
        const settled = await Promise.allSettled([
          lockInOrder('first', a.id, b.id),
          lockInOrder('second', b.id, a.id),
        ])
        expect(settled.map((outcome) => outcome.status)).toEqual(['fulfilled', 'fulfilled'])
        // The server broke the deadlock by aborting one; that one alone ran a second time.
        expect(conflicts).toEqual(['40P01'])
        expect([attempts.first, attempts.second].sort()).toEqual([1, 2])
        const retried = attempts.first === 2 ? 'first' : 'second'
        // It committed last, as a whole: both rows carry its names.
        expect(await namesLike('retry-%')).toEqual([`retry-${retried}-a`, `retry-${retried}-b`])
      },
    )

    it.runIf(usingPostgres())(
      'runs again a serializable transaction that lost to a concurrent one, which then sees its write',
      async () => {
        /** Each transaction counts the rows and adds one numbered after the count: write skew if both read 0. */
        const countThenAdd = async (trx: Tx, who: string) => {
          // The transaction's first statement, so that it takes effect for the whole transaction.
          await sql`set transaction isolation level serializable`.execute(trx)
          const { n } = await trx
            .selectFrom('organizations')
            .select((eb) => eb.fn.countAll<string>().as('n'))
            .where('name', 'like', 'retry-ssi-%')
            .executeTakeFirstOrThrow()
          return async () => {
            await insertOrganization(trx, { name: `retry-ssi-${n}-${who}` })
          }
        }
        const firstRead = Promise.withResolvers<void>()
        const secondRead = Promise.withResolvers<void>()
        const attempts = { first: 0, second: 0 }
        const first = inTransaction(db(), async (trx) => {
          attempts.first++
          const add = await countThenAdd(trx, 'first')
          firstRead.resolve()
          await secondRead.promise
          await add()
        })
        const second = inTransaction(db(), async (trx) => {
          const attempt = ++attempts.second
          const add = await countThenAdd(trx, 'second')
          if (attempt === 1) {
            await firstRead.promise
            secondRead.resolve()
            // Both have read the count; the first commits its row before this one adds its own.
            await first
          }
          await add()
        })
        await Promise.all([first, second])
        expect(attempts).toEqual({ first: 1, second: 2 })
        // Run again, the second saw the first's row: the outcome of running them one after the other.
        expect(await namesLike('retry-ssi-%')).toEqual(['retry-ssi-0-first', 'retry-ssi-1-second'])
      },
    )
  })
})
