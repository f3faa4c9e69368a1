import { type KyselyPlugin, PostgresQueryCompiler } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { currentRequestOrigin } from '../src/context.ts'
import { FAST_LOGIN_CONFIG, newUser, PASSWORD } from './helpers/accounts.ts'
import { createTestApp, type TestApp } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// No user enumeration through login: an unknown account, a deactivated one and a
// known one with a wrong password run the same SQL statements and one password verification each,
// and get the same answer. The statements are recorded by a Kysely plugin on the app's database.

/**
 * Records the SQL of every statement run through the database it is plugged into while serving a
 * request, transactions included (not what runs beside it, as the audit chainer a commit nudged).
 */
class StatementLog implements KyselyPlugin {
  recording: string[] | null = null
  readonly #compiler = new PostgresQueryCompiler()
  transformQuery: KyselyPlugin['transformQuery'] = (args) => {
    if (currentRequestOrigin()) this.recording?.push(this.#compiler.compileQuery(args.node, args.queryId).sql)
    return args.node
  }
  transformResult: KyselyPlugin['transformResult'] = async (args) => args.result
}

let database: TestDatabase
let t: TestApp
const log = new StatementLog()

beforeAll(async () => {
  database = await createTestDatabase()
  const db = database.handle.db.withPlugin(log)
  t = await createTestApp({
    database: { ...database, handle: { ...database.handle, db } },
    config: FAST_LOGIN_CONFIG,
  })
})

afterAll(async () => {
  await t?.close()
  await database?.dispose()
})

async function statementsOf(username: string, password: string) {
  await t.app.services.auditChainer.idle()
  log.recording = []
  const verify = t.app.services.passwords.verify.bind(t.app.services.passwords)
  let verifications = 0
  t.app.services.passwords.verify = async (...args) => {
    verifications++
    return verify(...args)
  }
  const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { username, password } })
  t.app.services.passwords.verify = verify
  const statements = log.recording
  log.recording = null
  return { status: res.statusCode, body: res.json(), statements, verifications }
}

describe('login of unknown and known accounts', () => {
  it('runs the same statements for an unknown account as for a wrong password of a known one', async () => {
    const known = await newUser(t.app)
    const wrong = await statementsOf(known.email, 'not the password at all')
    const unknown = await statementsOf('nobody-here@example.com', 'not the password at all')
    expect(wrong.status).toBe(401)
    expect(unknown.body).toEqual(wrong.body)
    expect(wrong.statements.length).toBeGreaterThan(0)
    expect(unknown.statements).toEqual(wrong.statements)
  })

  it('runs the same statements for a deactivated account, and no fewer verifications', async () => {
    const known = await newUser(t.app)
    const deactivated = await newUser(t.app)
    await t.app.db.updateTable('accounts').set({ active: false }).where('id', '=', deactivated.id).execute()
    const wrong = await statementsOf(known.email, 'not the password at all')
    const inactive = await statementsOf(deactivated.email, PASSWORD)
    expect(inactive.body).toEqual(wrong.body)
    expect(inactive.statements).toEqual(wrong.statements)
  })
})

describe('statements of a successful login', () => {
  it('writes the session and its first refresh token in one statement, the token expiring no later than the session', async () => {
    const user = await newUser(t.app)
    const ok = await statementsOf(user.email, PASSWORD)
    expect(ok.status).toBe(200)
    const writes = ok.statements.filter((s) => /insert into "(sessions|refresh_tokens)"/.test(s))
    expect(writes).toHaveLength(1)
    expect(writes[0]).toMatch(/insert into "sessions"[\s\S]*insert into "refresh_tokens"/)
    const session = await t.app.db
      .selectFrom('sessions')
      .innerJoin('refresh_tokens', 'refresh_tokens.session_id', 'sessions.id')
      .select(['sessions.expires_at', 'refresh_tokens.expires_at as refresh_expires_at'])
      .where('sessions.user_id', '=', user.id)
      .execute()
    expect(session).toHaveLength(1)
    expect(session[0]?.refresh_expires_at.getTime()).toBeLessThanOrEqual(
      session[0]?.expires_at.getTime() ?? 0,
    )
  })
})
