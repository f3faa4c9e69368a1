import { describe, expect, it } from 'vitest'
import { enforceRateLimits } from '../src/http/rate-limit.ts'
import { useTestApp } from './helpers/app.ts'

// Rate-limit counters of past windows are pruned by housekeeping, so an attacker
// spraying random addresses cannot grow the table without bound.

const t = useTestApp()

const keys = async () =>
  (await t.app.db.selectFrom('rate_limits').select('key').orderBy('key').execute()).map((r) => r.key)

describe('rate-limit retention', () => {
  it('removes counters whose window ended more than the longest window ago, and keeps current ones', async () => {
    for (let i = 0; i < 30; i++) {
      await enforceRateLimits(t.app.db, t.clock, [
        { key: `login:account:old-${i}`, max: 10, windowSeconds: 60 },
      ])
    }
    await enforceRateLimits(t.app.db, t.clock, [{ key: 'reset:account:hourly', max: 5, windowSeconds: 3600 }])
    t.clock.advanceSeconds(3600 + 60)
    await enforceRateLimits(t.app.db, t.clock, [{ key: 'login:account:current', max: 10, windowSeconds: 60 }])

    const removed = await t.app.housekeeping.runOnce()
    expect(removed.rate_limits).toBe(31)
    expect(await keys()).toEqual(['login:account:current'])
  })

  it('keeps an hourly counter while its window can still count', async () => {
    await enforceRateLimits(t.app.db, t.clock, [{ key: 'reset:account:still', max: 5, windowSeconds: 3600 }])
    t.clock.advanceSeconds(1800)
    await t.app.housekeeping.runOnce()
    expect(await keys()).toContain('reset:account:still')
  })
})
