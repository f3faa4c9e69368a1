import type { LightMyRequestResponse } from 'fastify'
import type { KyselyPlugin } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newUser, PASSWORD, uniqueEmail } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { EMAIL_PROOF_CONFIG } from './helpers/email-proofs.ts'

// Sign-up and email sign-in must not tell whether an address has an account: for a new, an
// existing and a deactivated address the answer has the same status, body and headers, the request
// runs the same statements, and so does the work after the answer (a proof stored and a mail
// queued for every address; only the mail's template differs).

class StatementCounter implements KyselyPlugin {
  count = 0
  transformQuery: KyselyPlugin['transformQuery'] = (args) => args.node
  transformResult: KyselyPlugin['transformResult'] = async (args) => {
    this.count++
    return args.result
  }
}

let database: TestDatabase
let t: TestApp
const counter = new StatementCounter()
/** Background work held back while a request is counted, run afterwards. */
let held: (() => Promise<void>)[] = []

beforeAll(async () => {
  database = await createTestDatabase()
  const db = database.handle.db.withPlugin(counter)
  t = await createTestApp({
    database: { ...database, handle: { ...database.handle, db } },
    config: {
      ...EMAIL_PROOF_CONFIG,
      'platform.auth.password.hash-memory-kib': '1024',
      'platform.auth.password.hash-iterations': '1',
    },
  })
  const run = t.app.background.run.bind(t.app.background)
  t.app.background.run = (name, work) => {
    held.push(() => new Promise<void>((resolve) => run(name, () => work().finally(resolve))))
  }
})

afterAll(async () => {
  await t?.close()
  await database?.dispose()
})

interface Observed {
  status: number
  body: string
  headers: Record<string, unknown>
  statements: number
  /** The statements of the work done after the answer. */
  afterwards: number
}

/**
 * The answer (without its per-request headers), the statements of the request alone, and those of
 * the work it left for after the answer.
 */
async function observe(request: () => Promise<LightMyRequestResponse>): Promise<Observed> {
  await t.app.background.idle()
  // The chainer of audit events written before (by the set-up) runs beside the counting otherwise.
  await t.app.services.auditChainer.idle()
  held = []
  counter.count = 0
  const res = await request()
  const statements = counter.count
  counter.count = 0
  for (const work of held) await work()
  const afterwards = counter.count
  const { date: _date, 'x-request-id': _id, ...headers } = res.headers
  return { status: res.statusCode, body: res.body, headers, statements, afterwards }
}

/** A new address, one with an active account, one with a deactivated account. */
async function addresses(): Promise<Record<'new' | 'existing' | 'deactivated', string>> {
  const existing = await newUser(t.app)
  const deactivated = await newUser(t.app)
  await t.app.db
    .updateTable('accounts')
    .set({ active: false, deactivated_at: t.clock.now() })
    .where('id', '=', deactivated.id)
    .execute()
  return { new: uniqueEmail('new'), existing: existing.email, deactivated: deactivated.email }
}

const outboxTemplates = (email: string) =>
  t.app.db
    .selectFrom('mail_outbox')
    .select('template')
    .where('recipient', '=', email)
    .execute()
    .then((rows) => rows.map((row) => row.template))

describe('POST /api/auth/sign-up', () => {
  it('answers a new, an existing and a deactivated address alike, in the same statements', async () => {
    const emails = await addresses()
    const observed = []
    for (const email of Object.values(emails)) {
      observed.push(
        await observe(() =>
          t.app.inject({
            method: 'POST',
            url: '/api/auth/sign-up',
            payload: { email, password: PASSWORD, organizationName: 'Acme' },
          }),
        ),
      )
    }
    expect(observed[0]).toMatchObject({ status: 202, body: '{}' })
    expect(observed[1]).toEqual(observed[0])
    expect(observed[2]).toEqual(observed[0])
    expect(observed[0]?.headers['set-cookie']).toBeUndefined()
    // What differs was done after the answer: a proof to the new address, notices to the others.
    expect(await outboxTemplates(emails.new)).toEqual(['sign_up_verification'])
    expect(await outboxTemplates(emails.existing)).toEqual(['sign_up_account_exists'])
    expect(await outboxTemplates(emails.deactivated)).toEqual(['sign_up_account_exists'])
  })

  it('hashes the password for every address alike', async () => {
    const emails = await addresses()
    const hash = t.app.services.passwords.hash.bind(t.app.services.passwords)
    let hashed = 0
    t.app.services.passwords.hash = (password: string) => {
      hashed++
      return hash(password)
    }
    try {
      for (const email of Object.values(emails)) {
        await observe(() =>
          t.app.inject({
            method: 'POST',
            url: '/api/auth/sign-up',
            payload: { email, password: PASSWORD, organizationName: 'Acme' },
          }),
        )
      }
    } finally {
      t.app.services.passwords.hash = hash
    }
    expect(hashed).toBe(3)
  })
})

describe('POST /api/auth/email-sign-in', () => {
  it('answers a new, an existing and a deactivated address alike, in the same statements', async () => {
    const emails = await addresses()
    const observed = []
    for (const email of Object.values(emails)) {
      observed.push(
        await observe(() =>
          t.app.inject({ method: 'POST', url: '/api/auth/email-sign-in', payload: { email } }),
        ),
      )
    }
    expect(observed[0]).toMatchObject({ status: 202, body: '{}' })
    expect(observed[1]).toEqual(observed[0])
    expect(observed[2]).toEqual(observed[0])
    expect(await outboxTemplates(emails.new)).toEqual(['email_sign_in_no_account'])
    expect(await outboxTemplates(emails.existing)).toEqual(['email_sign_in'])
    expect(await outboxTemplates(emails.deactivated)).toEqual(['email_sign_in_no_account'])
  })

  it('answers a code for a new, an existing and a deactivated address alike when no proof is live', async () => {
    const emails = await addresses()
    const observed = []
    for (const email of Object.values(emails)) {
      observed.push(
        await observe(() =>
          t.app.inject({
            method: 'POST',
            url: '/api/auth/email-sign-in/verify',
            payload: { email, code: '123456' },
          }),
        ),
      )
    }
    for (const each of observed) expect(each.status).toBe(400)
    expect(observed.map((o) => JSON.parse(o.body).code)).toEqual([
      'EMAIL_PROOF_INVALID',
      'EMAIL_PROOF_INVALID',
      'EMAIL_PROOF_INVALID',
    ])
    expect(observed[1]?.headers).toEqual(observed[0]?.headers)
    expect(observed[2]?.headers).toEqual(observed[0]?.headers)
  })
})
