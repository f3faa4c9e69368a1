import { describe, expect, it } from 'vitest'
import { openPostgres } from '../src/db/database.ts'
import { createTestApp, useTestApp } from './helpers/app.ts'
import { createTestDatabase } from './helpers/database.ts'

const t = useTestApp()

describe('health and metrics', () => {
  it('reports liveness', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/health/live' })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ status: 'UP' })
  })

  it('reports readiness with the database check', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/health/ready' })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({
      status: 'UP',
      checks: { database: 'UP', authorization: 'UP', storage: 'UP' },
    })
  })

  it('is not ready, with 503 naming the check, when the database is down', async () => {
    // Nothing listens on port 1: every connection attempt is refused.
    const unreachable = openPostgres('postgres://postgres@127.0.0.1:1/none', { poolSize: 1 })
    const database = { handle: unreachable, url: undefined, dispose: () => unreachable.close() }
    const down = await createTestApp({ database })
    try {
      const res = await down.app.inject({ method: 'GET', url: '/health/ready' })
      expect(res.statusCode).toBe(503)
      expect(res.json()).toMatchObject({
        code: 'SERVICE_UNAVAILABLE',
        detail: 'Not ready: database, authorization',
        checks: { database: 'DOWN', authorization: 'DOWN' },
      })
      const live = await down.app.inject({ method: 'GET', url: '/health/live' })
      expect(live.statusCode).toBe(200)
    } finally {
      await down.close()
      await database.dispose()
    }
  })

  it('lets a plugin add its own readiness check', async () => {
    const database = await createTestDatabase()
    const extra = await createTestApp({
      database,
      configure: (app) => app.readiness.add('mailbox', async () => Promise.reject(new Error('down'))),
    })
    try {
      const res = await extra.app.inject({ method: 'GET', url: '/health/ready' })
      expect(res.statusCode).toBe(503)
      expect(res.json().checks).toEqual({
        database: 'UP',
        authorization: 'UP',
        storage: 'UP',
        mailbox: 'DOWN',
      })
    } finally {
      await extra.close()
      await database.dispose()
    }
  })

  it('exposes request durations by route pattern and pool gauges in Prometheus format', async () => {
    await t.app.inject({ method: 'GET', url: '/health/live' })
    await t.app.inject({ method: 'GET', url: '/no/such/route/42' })
    const res = await t.app.inject({ method: 'GET', url: '/metrics' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^text\/plain/)
    expect(res.body).toMatch(
      /http_request_duration_seconds_count\{method="GET",route="\/health\/live",status_code="200"\} [1-9]/,
    )
    expect(res.body).toMatch(
      /http_request_duration_seconds_count\{method="GET",route="unmatched",status_code="401"\} 1/,
    )
    expect(res.body).not.toContain('/no/such/route/42')
    expect(res.body).toMatch(/db_pool_connections\{state="max"\} \d+/)
  })
})
