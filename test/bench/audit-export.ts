import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { sql } from 'kysely'
import { createOrganization } from '../../src/features/organizations/index.ts'
import { inProcessApp } from './in-process-app.ts'
import type { Instance } from './revocation-reach.ts'

// What an export of a large audit trail costs the service: an organization with EVENTS events
// (inserted straight into the table: the export reads rows, it does not check hashes), a service
// process, and GET /api/audit-events/export read to its end by an `audit:read` key while the
// process's resident memory is sampled. The goal: the peak stays within GROWTH_GOAL_MB of what the
// process held before the export, whatever the number of events. Measured with
// `BENCH_DATABASE_URL=postgres://… BENCH_AUDIT_EVENTS=<n> BENCH_ONLY='audit export' npm run bench`,
// four runs each: 0.3-0.8 MB for 20,000 events, 0.8-2.5 MB for 100,000, 1.3-2.3 MB for 200,000;
// two runs each: 8-11 MB for 1,000,000 and 23-31 MB for 2,000,000 (what still rises there is
// promoted garbage too: after 1,000,000 events a full collection took the heap from 76 to 58 MB and
// array buffers from 6.7 to 1.0 MB). Before `exportBatch` emptied pg's result array, every exported
// line was promoted to the old generation and kept until a full collection: 9-15, 40-46 and 43-62
// MB for 20,000, 100,000 and 200,000 events, 60 MB for 1,000,000.

export const AUDIT_EXPORT = 'audit export'
const EVENTS = Number(process.env.BENCH_AUDIT_EVENTS ?? 100_000)
export const GROWTH_GOAL_MB = 50
const SAMPLE_MS = 20

export interface ExportFigure {
  events: number
  bytes: number
  seconds: number
  rssBeforeMb: number
  rssPeakMb: number
}

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024
}

export async function measureAuditExport(
  env: Record<string, string>,
  dataDir: string,
  start: (env: Record<string, string>) => Promise<Instance & { child: { pid?: number } }>,
): Promise<ExportFigure> {
  const { app, close } = await inProcessApp(env, dataDir, 'export-seeder')
  let instance: (Instance & { child: { pid?: number } }) | undefined
  try {
    const organizationId = (await createOrganization(app.db, { name: 'Audit export' })).id
    const key = await app.services.apiKeys.create({
      organizationId,
      scopes: ['audit:read'],
      description: 'audit export bench',
      expiresAt: null,
    })
    // Past the key's own event (sequence 1): the seeded ones follow it.
    await sql`
      insert into audit_events (id, chain, sequence, organization_id, occurred_at, type, actor_type,
        actor_id, subject_type, subject_id, ip_address, user_agent, request_id, data, key_id,
        previous_hash, hash)
      select gen_random_uuid(), ${organizationId}, n + 1, ${organizationId}::uuid,
        now() + make_interval(secs => n / 1000.0), 'bench.event', 'user', gen_random_uuid()::text,
        'purchase_request', gen_random_uuid()::text, '203.0.113.1', 'bench/1.0', gen_random_uuid()::text,
        jsonb_build_object('n', n, 'from', 'DRAFT', 'to', 'SUBMITTED'), 'bench', repeat('0', 64), repeat('f', 64)
      from generate_series(1, ${EVENTS}) as n`.execute(app.db)
    await sql`update audit_chain_heads set sequence = ${EVENTS + 1} where chain = ${organizationId}`.execute(
      app.db,
    )

    instance = await start({ ...env, PLATFORM_DATA_DIR: path.join(dataDir, 'export-service') })
    const pid = instance.child.pid as number
    const headers = { 'x-api-key': key.rawKey }
    // One small page first, so what a first request loads is in the baseline.
    await (await fetch(`${instance.url}/api/audit-events?limit=1`, { headers })).arrayBuffer()
    const rssBeforeMb = await rssMb(pid)
    let rssPeakMb = rssBeforeMb
    let sampling = true
    const sampler = (async () => {
      while (sampling) {
        rssPeakMb = Math.max(rssPeakMb, await rssMb(pid))
        await new Promise((resolve) => setTimeout(resolve, SAMPLE_MS))
      }
    })()
    const started = performance.now()
    const res = await fetch(`${instance.url}/api/audit-events/export`, { headers })
    if (res.status !== 200 || !res.body) throw new Error(`the export answered ${res.status}`)
    let bytes = 0
    let lines = 0
    for await (const chunk of res.body) {
      bytes += chunk.length
      for (const byte of chunk) if (byte === 10) lines++
    }
    const seconds = (performance.now() - started) / 1000
    sampling = false
    await sampler
    if (lines !== EVENTS + 1) throw new Error(`the export held ${lines} events, not ${EVENTS + 1}`)
    return { events: lines, bytes, seconds, rssBeforeMb, rssPeakMb }
  } finally {
    instance?.child.kill('SIGTERM')
    await instance?.done.catch(() => undefined)
    await close()
  }
}

/** `audit export (N events, NDJSON): … MB in … s; service RSS … → peak … MB, growth … MB (goal …)` */
export function exportLine(figure: ExportFigure): string {
  const growth = figure.rssPeakMb - figure.rssBeforeMb
  const met = growth < GROWTH_GOAL_MB ? 'met' : 'MISSED'
  return `${AUDIT_EXPORT} (${figure.events.toLocaleString('en')} events, NDJSON): ${(figure.bytes / 1024 / 1024).toFixed(1)} MB in ${figure.seconds.toFixed(1)} s; service RSS ${figure.rssBeforeMb.toFixed(0)} MB before, peak ${figure.rssPeakMb.toFixed(0)} MB, growth ${growth.toFixed(1)} MB (goal < ${GROWTH_GOAL_MB} MB: ${met})`
}
