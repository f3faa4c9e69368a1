import { setImmediate as nextMacrotask } from 'node:timers/promises'
import { PGlite } from '@electric-sql/pglite'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PGliteDialect } from '../src/db/pglite-dialect.ts'

let pglite: PGlite
beforeAll(async () => {
  pglite = new PGlite()
  await pglite.waitReady
})
afterAll(async () => {
  await pglite.close()
})

describe('PGlite dialect', () => {
  it('hands its single connection to one holder at a time, in order', async () => {
    const driver = new PGliteDialect(pglite).createDriver()
    await driver.init()
    const first = await driver.acquireConnection()
    const order: string[] = []
    const second = driver.acquireConnection().then((c) => {
      order.push('second')
      return c
    })
    const third = driver.acquireConnection().then((c) => {
      order.push('third')
      return c
    })
    // Every microtask has run by the next macrotask: a free connection would have been handed out.
    await nextMacrotask()
    expect(order).toEqual([])
    await driver.releaseConnection(first)
    await driver.releaseConnection(await second)
    await driver.releaseConnection(await third)
    expect(order).toEqual(['second', 'third'])
  })
})
