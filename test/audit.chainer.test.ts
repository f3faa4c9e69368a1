import type { Static } from '@sinclair/typebox'
import { describe, expect, it, onTestFinished } from 'vitest'
import { ChainVerifier } from '../src/audit/chain.ts'
import { type AuditTrail, verifyStoredChain } from '../src/audit/index.ts'
import { inTransaction } from '../src/db/database.ts'
import type { Tx } from '../src/db/schema.ts'
import type { AuditEvent } from '../src/features/audit-events/schemas.ts'
import { ACCOUNT_TEST_CONFIG, asUser, newActor, newOrganization } from './helpers/accounts.ts'
import { type TestApp, useTestApp, useTestAppBeside } from './helpers/app.ts'
import { usingPostgres } from './helpers/database.ts'
import { pollUntil } from './helpers/poll.ts'

// Audit events are written by the transaction that causes them without their place in the chain,
// and chained moments later (src/audit/chainer.ts): writers of one organization no longer wait for
// each other, the chain keeps the order events were committed in, nothing is lost or chained twice
// when two instances chain at once, and an event whose writer never nudged a chainer is found by
// the sweep.

const t = useTestApp({ config: ACCOUNT_TEST_CONFIG })
const other = useTestAppBeside(t, () => ({
  config: { ...ACCOUNT_TEST_CONFIG, 'platform.auth.jwt.secret': t.config.auth.jwt.secret },
}))

const event = (organizationId: string, n: number) => ({
  type: 'test.event',
  organizationId,
  actor: { type: 'system' as const, id: null },
  data: { n },
})

const record = (app: TestApp, organizationId: string, n: number) =>
  inTransaction(app.app.db, (trx) => app.app.services.audit.record(trx, event(organizationId, n)))

/** The chain's events in chain order: their `n` and sequence. */
async function chained(organizationId: string) {
  const rows = await t.app.db
    .selectFrom('audit_events')
    .select(['sequence', 'data'])
    .where('chain', '=', organizationId)
    .where('sequence', 'is not', null)
    .orderBy('sequence')
    .execute()
  return rows.map((row) => ({ sequence: Number(row.sequence), n: (row.data as { n: number }).n }))
}

const verify = (organizationId: string) =>
  verifyStoredChain(t.app.db, t.app.services.audit.keys, organizationId)

/**
 * Stops both instances' chainers (their sweeps; nudges are ignored) until the test finishes, so
 * what is written stays unchained until a reader settles its chain.
 */
async function chainersStopped(): Promise<void> {
  const chainers = [t, other].map((app) => app.app.services.auditChainer)
  await Promise.all(chainers.map((chainer) => chainer.stop()))
  onTestFinished(() => {
    for (const chainer of chainers) chainer.start()
  })
}

/**
 * An exported line as the chain verifier reads an event: of the organization's chain, hashed with
 * the current key (the export names no key).
 */
const exportedEvent = (organizationId: string, line: Static<typeof AuditEvent>) => {
  const { actor, subject, occurredAt, ...rest } = line
  return {
    ...rest,
    chain: organizationId,
    organizationId,
    occurredAt: new Date(occurredAt),
    actorType: actor.type,
    actorId: actor.id,
    subjectType: subject?.type ?? null,
    subjectId: subject?.id ?? null,
    keyId: t.app.services.audit.keys.currentId,
  }
}

/** A transaction held open after recording `n`, until `commit()`. */
function openWriter(audit: AuditTrail, organizationId: string, n: number) {
  let commit: () => void = () => {}
  let recorded: () => void = () => {}
  const held = new Promise<void>((resolve) => {
    commit = resolve
  })
  const written = new Promise<void>((resolve) => {
    recorded = resolve
  })
  const done = inTransaction(t.app.db, async (trx: Tx) => {
    await audit.record(trx, event(organizationId, n))
    recorded()
    await held
  })
  return { written, commit, done }
}

describe('chaining off the request path', () => {
  // The embedded database runs one transaction at a time: a writer cannot commit beside an open one.
  it.runIf(usingPostgres())(
    'lets a writer of an organization commit while another of the same organization holds an uncommitted event',
    async () => {
      const organizationId = await newOrganization(t.app)
      const slow = openWriter(t.app.services.audit, organizationId, 1)
      await slow.written
      // Under a chain lock taken by the write, this would wait for the open transaction.
      await record(t, organizationId, 2)
      await t.app.services.auditChainer.idle()
      expect(await chained(organizationId)).toEqual([{ sequence: 1, n: 2 }])
      slow.commit()
      await slow.done
      await t.app.services.auditChainer.idle()
      // Chained in commit order, and the event chained first kept its place.
      expect(await chained(organizationId)).toEqual([
        { sequence: 1, n: 2 },
        { sequence: 2, n: 1 },
      ])
      expect(await verify(organizationId)).toMatchObject({ ok: true, events: 2, unchained: 0 })
    },
  )

  it('keeps the order of events written by one transaction, and of transactions one after another', async () => {
    const organizationId = await newOrganization(t.app)
    await inTransaction(t.app.db, async (trx) => {
      for (const n of [1, 2, 3]) await t.app.services.audit.record(trx, event(organizationId, n))
    })
    await record(t, organizationId, 4)
    await record(t, organizationId, 5)
    await t.app.services.auditChainer.idle()
    expect((await chained(organizationId)).map((e) => e.n)).toEqual([1, 2, 3, 4, 5])
  })

  it('loses and duplicates nothing when many writers on two instances record at once', async () => {
    const organizationId = await newOrganization(t.app)
    const writers = Array.from({ length: 60 }, (_, n) => record(n % 2 === 0 ? t : other, organizationId, n))
    await Promise.all(writers)
    await Promise.all([t.app.services.auditChainer.drain(), other.app.services.auditChainer.drain()])
    const events = await chained(organizationId)
    expect(events.map((e) => e.sequence)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1))
    expect(new Set(events.map((e) => e.n)).size).toBe(60)
    // Each instance's writes in the order that instance committed them.
    for (const parity of [0, 1]) {
      const ns = events.map((e) => e.n).filter((n) => n % 2 === parity)
      expect(ns.length).toBe(30)
    }
    expect(await verify(organizationId)).toMatchObject({
      ok: true,
      events: 60,
      head: { sequence: 60 },
      unchained: 0,
    })
  })

  it('names the unchained tail in verification, and the sweep of another instance chains it', async () => {
    const organizationId = await newOrganization(t.app)
    await record(t, organizationId, 1)
    await t.app.services.auditChainer.idle()
    // A writer that committed and stopped before nudging any chainer (a crash; a transaction of its own).
    await t.app.db.transaction().execute(async (trx) => {
      await t.app.services.audit.record(trx, event(organizationId, 2))
      await t.app.services.audit.record(trx, event(organizationId, 3))
    })
    expect(await verify(organizationId)).toMatchObject({ ok: true, events: 1, unchained: 2 })
    // Nobody is told; the sweeps every instance runs each second find them.
    await pollUntil(
      'the sweep chains the tail',
      async () => (await verify(organizationId)).unchained === 0,
      10_000,
    )
    expect(await verify(organizationId)).toMatchObject({ ok: true, events: 3, head: { sequence: 3 } })
    expect((await chained(organizationId)).map((e) => e.n)).toEqual([1, 2, 3])
  })

  it('shows an event in the audit list as soon as it is committed, on another instance than its writer', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const organizationId = admin.user.organizationId
    // Written without a nudge: only the list's own settling can chain it before the read.
    await t.app.db.transaction().execute((trx) => t.app.services.audit.record(trx, event(organizationId, 7)))
    const res = await asUser(other.app, admin.session, {
      method: 'GET',
      url: '/api/audit-events?type=test.event',
    })
    expect(res.statusCode).toBe(200)
    expect(res.json().items).toMatchObject([{ type: 'test.event', data: { n: 7 } }])
    const [listed] = res.json().items
    expect(listed.sequence).toBe(res.json().head.sequence)
    expect(await verify(organizationId)).toMatchObject({ ok: true, unchained: 0 })
  })

  it('exports an event committed just before, unchained until the export, with its sequence and hashes, and the export verifies', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const organizationId = admin.user.organizationId
    await chainersStopped()
    // Committed without a nudge, and no sweep runs: only the export's own settling can chain it.
    await t.app.db.transaction().execute((trx) => t.app.services.audit.record(trx, event(organizationId, 9)))
    expect((await verify(organizationId)).unchained).toBeGreaterThanOrEqual(1)
    const res = await asUser(other.app, admin.session, { method: 'GET', url: '/api/audit-events/export' })
    expect(res.statusCode).toBe(200)
    const lines = res.body
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
    const last = lines.at(-1)
    expect(last).toMatchObject({ type: 'test.event', data: { n: 9 } })
    expect(last.sequence).toBe(lines.length)
    expect(last.hash).toMatch(/^[0-9a-f]{64}$/)
    expect(res.headers['x-audit-head']).toBe(`${last.sequence}:${last.hash}`)
    // The whole export, fed to the verifier from the chain's first event: numbered without a gap,
    // each line chained to the one before, each hash recomputed.
    const verifier = new ChainVerifier(t.app.services.audit.keys)
    for (const line of lines) verifier.check(exportedEvent(organizationId, line))
    expect(verifier.result).toEqual({
      ok: true,
      events: lines.length,
      head: { sequence: last.sequence, hash: last.hash },
    })
    expect(await verify(organizationId)).toMatchObject({ ok: true, events: lines.length, unchained: 0 })
  })
})
