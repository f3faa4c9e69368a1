import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { AppError } from '../src/errors.ts'
import { countInStatement, enforceRateLimits, type Limit } from '../src/http/rate-limit.ts'
import { useTestApp } from './helpers/app.ts'

// A route may count its limits inside its handler's one statement (rule `inStatement`): the hits
// are CTEs of that statement and guard its work. They must count and answer as the preHandler's
// `enforceRateLimits` does.

const t = useTestApp()

const counter = async (key: string) =>
  (await t.app.db.selectFrom('rate_limits').select('count').where('key', '=', key).executeTakeFirst())?.count

/** A statement holding the hits whose own work is a flag set only within the limits. */
async function guarded(limits: Limit[]) {
  const counted = countInStatement(limits, t.clock.now())
  const { rows } = await sql<{ counts: (number | null)[]; worked: boolean | null }>`
    with ${counted.hits.ctes}work as (select true as worked where ${counted.hits.within})
    select ${counted.hits.counts} as counts, (select worked from work) as worked`.execute(t.app.db)
  const row = rows[0] as { counts: (number | null)[]; worked: boolean | null }
  let refused: unknown = null
  try {
    counted.check(row.counts)
  } catch (error) {
    refused = error
  }
  return { counts: row.counts, worked: row.worked === true, refused }
}

const rateLimited = (error: unknown) => {
  expect(error).toBeInstanceOf(AppError)
  expect((error as AppError).code).toBe('RATE_LIMITED')
  return (error as AppError).headers?.['retry-after']
}

describe('rate limits counted in a statement', () => {
  it('counts each hit, guards the work, and stops counting after the first exceeded limit', async () => {
    const limits = [
      { key: 'stmt:first', max: 1, windowSeconds: 60 },
      { key: 'stmt:second', max: 5, windowSeconds: 60 },
    ]
    expect(await guarded(limits)).toEqual({ counts: [1, 1], worked: true, refused: null })

    const over = await guarded(limits)
    expect(over.counts).toEqual([2, null])
    expect(over.worked).toBe(false)
    expect(await counter('stmt:second')).toBe(1)

    // The same Retry-After as the preHandler's answer at this instant.
    let preHandler: unknown = null
    await enforceRateLimits(t.app.db, t.clock, [{ key: 'stmt:other', max: 0, windowSeconds: 60 }]).catch(
      (error: unknown) => {
        preHandler = error
      },
    )
    expect(rateLimited(over.refused)).toBe(rateLimited(preHandler))
  })

  it('starts a new window once the current one has passed', async () => {
    const limits = [{ key: 'stmt:window', max: 1, windowSeconds: 60 }]
    await guarded(limits)
    expect((await guarded(limits)).worked).toBe(false)
    t.clock.advanceSeconds(60)
    expect(await guarded(limits)).toEqual({ counts: [1], worked: true, refused: null })
  })

  it('runs the work without limits', async () => {
    expect(await guarded([])).toEqual({ counts: [], worked: true, refused: null })
  })
})
