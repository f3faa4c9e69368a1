import { describe, expect, it } from 'vitest'
import { createTestApp } from './helpers/app.ts'

describe('graceful shutdown', () => {
  it('finishes in-flight requests and refuses new ones while closing', async () => {
    const entered = Promise.withResolvers<void>()
    const release = Promise.withResolvers<void>()
    const t = await createTestApp({
      configure: (app) => {
        app.get('/test/slow', { config: { public: true } }, async () => {
          entered.resolve()
          await release.promise
          return { done: true }
        })
      },
    })
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 })
    const inFlight = fetch(`${base}/test/slow`)
    await entered.promise

    const closed = t.app.close()
    const late = await fetch(`${base}/health/live`).then(
      (res) => res.status,
      () => 'refused',
    )
    expect([503, 'refused']).toContain(late)

    release.resolve()
    const res = await inFlight
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ done: true })
    await closed
    await t.database.dispose()
  })
})
