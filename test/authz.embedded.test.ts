import { readFile } from 'node:fs/promises'
import { type KyselyPlugin, sql } from 'kysely'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import {
  EmbeddedAuthorization,
  MAX_RESOLUTION_DEPTH,
  ResolutionDepthExceededError,
  UnsupportedModelError,
  writableTuple,
} from '../src/authz/embedded.ts'
import { loadModel, MODEL_FILE, ModelIndex, parseModel } from '../src/authz/model.ts'
import {
  type AuthorizationPort,
  AuthorizationRequestError,
  AuthorizationUnavailableError,
  type TupleKey,
} from '../src/authz/port.ts'
import { authorizationContract } from './authz.contract.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'

// The embedded evaluator passes the authorization contract on this test file's own
// database, and keeps what it adds of its own: OpenFGA's depth limit, termination on cycles, model
// checks on writes, one query per lookup, and correct answers over a large tuple table.

let database: TestDatabase
const db = () => database.handle.db

beforeAll(async () => {
  database = await createTestDatabase()
})

afterAll(async () => {
  await database?.dispose()
})

const clearTuples = async () => {
  await db().deleteFrom('authz_tuples').execute()
}

authorizationContract('embedded', async (dsl) => {
  const port = new EmbeddedAuthorization(db(), new ModelIndex(parseModel(dsl)))
  return { port, reset: clearTuples, close: () => port.close() }
})

// The same contract with every check asked along with a read (checkWithRead, one statement for the
// read and the check's first round of lookups): every answer must be the check's, and the rows the
// read's, all of them, in its order.
authorizationContract('embedded, each check along with a read', async (dsl) => {
  const inner = new EmbeddedAuthorization(db(), new ModelIndex(parseModel(dsl)))
  const port: AuthorizationPort = {
    async check(request) {
      const read = db()
        .selectFrom(sql<{ n: number }>`(select generate_series(1, 3) as n)`.as('s'))
        .select('n')
        .orderBy('n', 'desc')
      const { allowed, rows } = await inner.checkWithRead(request, db(), read)
      if (JSON.stringify(rows) !== '[{"n":3},{"n":2},{"n":1}]')
        throw new Error(`the read came back as ${JSON.stringify(rows)}`)
      return allowed
    },
    write: (writes, deletes) => inner.write(writes, deletes),
    ready: () => inner.ready(),
    close: () => inner.close(),
  }
  return { port, reset: clearTuples, close: () => port.close() }
})

const tuple = (user: string, relation: string, object: string): TupleKey => ({ user, relation, object })

const embedded = (dsl: string, executor = db()) =>
  new EmbeddedAuthorization(executor, new ModelIndex(parseModel(dsl)))

const FOLDERS = `model
  schema 1.1
type user
type group
  relations
    define member: [user, group#member]
type folder
  relations
    define parent: [folder]
    define viewer: [user] or viewer from parent
type document
  relations
    define viewer: [user]
    define blocked: [user, group#member]
    define can_read: viewer but not blocked
`

/** A Kysely instance over the test database that counts the queries it runs. */
function countingQueries() {
  const counter = { queries: 0 }
  const plugin: KyselyPlugin = {
    // Results, not query nodes: a union's parts pass through transformQuery one by one.
    transformQuery(args) {
      return args.node
    },
    async transformResult(args) {
      counter.queries++
      return args.result
    },
  }
  return { db: db().withPlugin(plugin), counter }
}

describe('embedded authorization evaluator', () => {
  beforeEach(clearTuples)

  describe('resolution depth', () => {
    /** folder:f0's parent is folder:f1, whose parent is folder:f2, and so on. */
    const chain = (length: number) =>
      Array.from({ length: length - 1 }, (_, i) => tuple(`folder:f${i + 1}`, 'parent', `folder:f${i}`))

    it(`answers within ${MAX_RESOLUTION_DEPTH} nested resolutions, as OpenFGA`, async () => {
      const port = embedded(FOLDERS)
      await port.write(
        [...chain(40), tuple('user:anne', 'viewer', `folder:f${MAX_RESOLUTION_DEPTH - 1}`)],
        [],
      )
      expect(await port.check(tuple('user:anne', 'viewer', 'folder:f0'))).toBe(true)
      // Found before the depth runs out, however long the chain beyond.
      await port.write([tuple('user:bob', 'viewer', 'folder:f3')], [])
      expect(await port.check(tuple('user:bob', 'viewer', 'folder:f0'))).toBe(true)
    })

    it('fails closed, as unavailable, when a check needs more nested resolutions', async () => {
      const port = embedded(FOLDERS)
      await port.write([...chain(40), tuple('user:anne', 'viewer', `folder:f${MAX_RESOLUTION_DEPTH}`)], [])
      const check = port.check(tuple('user:anne', 'viewer', 'folder:f0'))
      await expect(check).rejects.toThrow(ResolutionDepthExceededError)
      await expect(check).rejects.toThrow(AuthorizationUnavailableError)
      await expect(port.check(tuple('user:nobody', 'viewer', 'folder:f0'))).rejects.toThrow(
        ResolutionDepthExceededError,
      )
      // Started nearer to the tuples, the same checks fit within the depth.
      expect(await port.check(tuple('user:anne', 'viewer', 'folder:f15'))).toBe(true)
      expect(await port.check(tuple('user:nobody', 'viewer', 'folder:f30'))).toBe(false)
    })

    it('counts the parents followed, not the computed usersets on the way, as OpenFGA', async () => {
      // Two relations per folder on the way up, one parent followed.
      const port = embedded(`model
  schema 1.1
type user
type folder
  relations
    define parent: [folder]
    define viewer: [user] or inherited
    define inherited: viewer from parent
`)
      const last = MAX_RESOLUTION_DEPTH - 1
      await port.write(
        [
          ...chain(40),
          tuple('user:anne', 'viewer', `folder:f${last}`),
          tuple('user:bob', 'viewer', `folder:f${last + 1}`),
        ],
        [],
      )
      expect(await port.check(tuple('user:anne', 'viewer', 'folder:f0'))).toBe(true)
      await expect(port.check(tuple('user:bob', 'viewer', 'folder:f0'))).rejects.toThrow(
        ResolutionDepthExceededError,
      )
    })
  })

  describe('cycles', () => {
    it('terminates on a self-referencing group and on a ring of groups', async () => {
      const port = embedded(FOLDERS)
      const ring = Array.from({ length: 10 }, (_, i) =>
        tuple(`group:g${(i + 1) % 10}#member`, 'member', `group:g${i}`),
      )
      await port.write(ring, [])
      // Implicit, so refused as a write (as by OpenFGA), but a row an earlier version may have stored.
      await db()
        .insertInto('authz_tuples')
        .values({
          object_type: 'group',
          object_id: 'self',
          relation: 'member',
          subject_type: 'group',
          subject_id: 'self',
          subject_relation: 'member',
        })
        .execute()
      expect(await port.check(tuple('user:zed', 'member', 'group:self'))).toBe(false)
      expect(await port.check(tuple('user:zed', 'member', 'group:g0'))).toBe(false)
      await port.write([tuple('user:anne', 'member', 'group:g7')], [])
      for (let i = 0; i < 10; i++) {
        expect(await port.check(tuple('user:anne', 'member', `group:g${i}`)), `group:g${i}`).toBe(true)
      }
    })

    it('terminates on a parent loop', async () => {
      const port = embedded(FOLDERS)
      await port.write(
        [
          tuple('folder:a', 'parent', 'folder:b'),
          tuple('folder:b', 'parent', 'folder:c'),
          tuple('folder:c', 'parent', 'folder:a'),
        ],
        [],
      )
      expect(await port.check(tuple('user:anne', 'viewer', 'folder:a'))).toBe(false)
      await port.write([tuple('user:anne', 'viewer', 'folder:b')], [])
      for (const folder of ['folder:a', 'folder:b', 'folder:c']) {
        expect(await port.check(tuple('user:anne', 'viewer', folder)), folder).toBe(true)
      }
    })

    it('evaluates an exclusion whose subtraction runs through a cycle', async () => {
      const port = embedded(FOLDERS)
      await port.write(
        [
          tuple('group:a#member', 'member', 'group:b'),
          tuple('group:b#member', 'member', 'group:a'),
          tuple('group:a#member', 'blocked', 'document:plan'),
          tuple('user:anne', 'viewer', 'document:plan'),
          tuple('user:bob', 'viewer', 'document:plan'),
          tuple('user:bob', 'member', 'group:b'),
        ],
        [],
      )
      expect(await port.check(tuple('user:anne', 'can_read', 'document:plan'))).toBe(true)
      expect(await port.check(tuple('user:bob', 'can_read', 'document:plan'))).toBe(false)
    })

    // OpenFGA's answers, checked against its server (v1.10.2): a false that met a cycle carries
    // "cycle detected" up through the subtraction, wherever the cycle closed; its recursive fast path
    // (group#member above, for a user) carries none; and a relation the user's type cannot reach is
    // false before any tuple is read, so no cycle is met there.
    const INHERITED = `model
  schema 1.1
type user
type folder
  relations
    define parent: [folder]
    define viewer: [user] or inherited
    define inherited: viewer from parent
type document
  relations
    define parent: [folder]
    define viewer: [user]
    define blocked: viewer from parent
    define can_read: viewer but not blocked
`

    it('denies through an exclusion whose subtraction met a cycle, even one closed inside it', async () => {
      const port = embedded(INHERITED)
      await port.write(
        [
          tuple('folder:a', 'parent', 'folder:b'),
          tuple('folder:b', 'parent', 'folder:a'),
          tuple('folder:a', 'parent', 'document:plan'),
          tuple('user:anne', 'viewer', 'document:plan'),
        ],
        [],
      )
      expect(await port.check(tuple('user:anne', 'can_read', 'document:plan'))).toBe(false)
      expect(await port.check(tuple('user:anne', 'viewer', 'document:plan'))).toBe(true)
      // With `viewer from parent` in viewer itself, OpenFGA takes its fast path: no cycle met.
      await clearTuples()
      const recursive = embedded(INHERITED.replace('[user] or inherited', '[user] or viewer from parent'))
      await recursive.write(
        [
          tuple('folder:a', 'parent', 'folder:b'),
          tuple('folder:b', 'parent', 'folder:a'),
          tuple('folder:a', 'parent', 'document:plan'),
          tuple('user:anne', 'viewer', 'document:plan'),
        ],
        [],
      )
      expect(await recursive.check(tuple('user:anne', 'can_read', 'document:plan'))).toBe(true)
    })

    const GROUPS = `model
  schema 1.1
type user
type employee
type group
  relations
    define member: [user, group#member]
type document
  relations
    define viewer: [user, employee, group#member]
    define blocked: [user, group#member]
    define can_read: viewer but not blocked
`
    const blockedRing = [
      tuple('group:a#member', 'member', 'group:b'),
      tuple('group:b#member', 'member', 'group:a'),
      tuple('group:a#member', 'blocked', 'document:plan'),
    ]

    it('denies a userset through an exclusion whose subtraction met a cycle of groups', async () => {
      const port = embedded(GROUPS)
      await port.write(
        [
          ...blockedRing,
          tuple('group:x#member', 'viewer', 'document:plan'),
          tuple('user:anne', 'viewer', 'document:plan'),
        ],
        [],
      )
      expect(await port.check(tuple('group:x#member', 'can_read', 'document:plan'))).toBe(false)
      // For a user, OpenFGA takes its fast path through the groups, which meets no cycle.
      expect(await port.check(tuple('user:anne', 'can_read', 'document:plan'))).toBe(true)
    })

    it('meets no cycle in a relation the user’s type cannot reach', async () => {
      const port = embedded(GROUPS)
      await port.write([...blockedRing, tuple('employee:erin', 'viewer', 'document:plan')], [])
      expect(await port.check(tuple('employee:erin', 'can_read', 'document:plan'))).toBe(true)
    })
  })

  describe('writes', () => {
    const count = async () =>
      Number(
        (
          await db()
            .selectFrom('authz_tuples')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      )

    it('rejects malformed tuples and changes nothing', async () => {
      const port = embedded(FOLDERS)
      await port.write([tuple('user:anne', 'viewer', 'document:plan')], [])
      for (const bad of [
        tuple('user', 'viewer', 'document:plan'),
        tuple('user:anne', 'viewer', 'document'),
        tuple('user:anne', 'viewer', 'document:*'),
        tuple('user:*#member', 'member', 'group:a'),
        tuple('user:anne', 'viewer', 'document:has space'),
        tuple('user:anne', 'viewer', 'document:a#b'),
        tuple('user:anne', 'view er', 'document:plan'),
        tuple('user:anne', 'viewer', `document:${'x'.repeat(300)}`),
        tuple('group:a#nothing', 'member', 'group:b'),
      ]) {
        await expect(
          port.write([tuple('user:bob', 'viewer', 'document:plan'), bad], []),
          JSON.stringify(bad),
        ).rejects.toThrow(AuthorizationRequestError)
      }
      expect(await count()).toBe(1)
    })

    it('refuses an implicit tuple, a userset made a member of itself, as OpenFGA does', async () => {
      const port = embedded(FOLDERS)
      await expect(port.write([tuple('group:eng#member', 'member', 'group:eng')], [])).rejects.toThrow(
        AuthorizationRequestError,
      )
      expect(await count()).toBe(0)
      await port.write([tuple('group:eng#member', 'member', 'group:all')], [])
      expect(await count()).toBe(1)
    })

    it('rejects a tuple written and deleted in one call', async () => {
      const port = embedded(FOLDERS)
      const anne = tuple('user:anne', 'viewer', 'document:plan')
      await expect(port.write([anne], [anne])).rejects.toThrow(AuthorizationRequestError)
      expect(await count()).toBe(0)
    })

    it('deletes a tuple the model no longer admits, and ignores it in checks until then', async () => {
      // Written under an older model: a wildcard and a userset that FOLDERS' document#viewer does not admit.
      await db()
        .insertInto('authz_tuples')
        .values({
          object_type: 'document',
          object_id: 'plan',
          relation: 'viewer',
          subject_type: 'group',
          subject_id: 'x',
          subject_relation: 'owner',
        })
        .execute()
      await db()
        .insertInto('authz_tuples')
        .values({
          object_type: 'document',
          object_id: 'plan',
          relation: 'viewer',
          subject_type: 'user',
          subject_id: '*',
        })
        .execute()
      const port = embedded(FOLDERS)
      expect(await port.check(tuple('user:anne', 'viewer', 'document:plan'))).toBe(false)
      await port.write(
        [],
        [tuple('user:*', 'viewer', 'document:plan'), tuple('group:x#owner', 'viewer', 'document:plan')],
      )
      expect(await count()).toBe(0)
    })

    it('stops answering once closed', async () => {
      const port = embedded(FOLDERS)
      await port.ready()
      await port.close()
      await expect(port.check(tuple('user:anne', 'viewer', 'document:plan'))).rejects.toThrow(
        AuthorizationUnavailableError,
      )
      await expect(port.ready()).rejects.toThrow(AuthorizationUnavailableError)
    })
  })

  describe('queries', () => {
    /** The project's model, mia a member of acme, which owns pr-1; a port over a counting database. */
    async function memberOfAcmeOwningPr1() {
      const model = await readFile(MODEL_FILE, 'utf8')
      await embedded(model).write(
        [
          tuple('user:mia', 'member', 'organization:acme'),
          tuple('organization:acme', 'owner_organization', 'purchase_request:pr-1'),
        ],
        [],
      )
      const { db: counted, counter } = countingQueries()
      return { counted, counter, port: embedded(model, counted) }
    }

    it("makes one query per round of lookups in a check: parents with the user's tuples on them, union branches together", async () => {
      const { counter, port } = await memberOfAcmeOwningPr1()
      // owner_organization of pr-1 with the user's tuples on acme (member, admin), in one statement.
      expect(await port.check(tuple('user:mia', 'can_view', 'purchase_request:pr-1'))).toBe(true)
      expect(counter.queries).toBe(1)
      counter.queries = 0
      expect(await port.check(tuple('user:gus', 'can_view', 'purchase_request:pr-1'))).toBe(false)
      expect(counter.queries).toBe(1)
    })

    it("records a creation's tuples and their outbox log in one statement, and a mixed list in order", async () => {
      const model = await readFile(MODEL_FILE, 'utf8')
      const { db: counted, counter } = countingQueries()
      const port = embedded(model, counted)
      const recorder = port.recorderFor(counted)
      if (!recorder) throw new Error('the evaluator reads this database: it records in its transactions')
      const now = new Date('2026-11-25T12:00:00.000Z')
      const change = (operation: 'write' | 'delete', subject: string, relation: string, object: string) => ({
        operation,
        subject,
        relation,
        object,
      })
      await counted.transaction().execute(async (trx) => {
        counter.queries = 0
        await recorder.record(
          trx,
          [
            change('write', 'organization:acme', 'owner_organization', 'purchase_request:pr-7'),
            change('write', 'user:mia', 'member', 'organization:acme'),
            change('write', 'user:mia', 'member', 'organization:acme'),
          ],
          now,
        )
        expect(counter.queries).toBe(1)
      })
      expect(await port.check(tuple('user:mia', 'can_view', 'purchase_request:pr-7'))).toBe(true)
      const logged = await db()
        .selectFrom('authz_outbox')
        .select(['operation', 'subject', 'relation', 'object', 'processed_at'])
        .where('created_at', '=', now)
        .orderBy('id')
        .execute()
      expect(logged).toEqual([
        {
          ...change('write', 'organization:acme', 'owner_organization', 'purchase_request:pr-7'),
          processed_at: now,
        },
        { ...change('write', 'user:mia', 'member', 'organization:acme'), processed_at: now },
        { ...change('write', 'user:mia', 'member', 'organization:acme'), processed_at: now },
      ])
      // A delete then a write: applied in that order.
      await counted
        .transaction()
        .execute((trx) =>
          recorder.record(
            trx,
            [
              change('delete', 'user:mia', 'member', 'organization:acme'),
              change('write', 'user:mia', 'admin', 'organization:acme'),
            ],
            now,
          ),
        )
      expect(await port.check(tuple('user:mia', 'can_edit', 'purchase_request:pr-7'))).toBe(true)
      const tuples = await db()
        .selectFrom('authz_tuples')
        .select(['relation', 'subject_id'])
        .where('object_id', '=', 'acme')
        .execute()
      expect(tuples).toEqual([{ relation: 'admin', subject_id: 'mia' }])
      // A write the model refuses records nothing.
      await expect(
        counted
          .transaction()
          .execute((trx) =>
            recorder.record(
              trx,
              [change('write', 'user:mia', 'owner_organization', 'purchase_request:pr-8')],
              now,
            ),
          ),
      ).rejects.toThrow(AuthorizationRequestError)
    })

    it("reads an object's row in the statement of the check's first round (checkWithRead)", async () => {
      const { counted, counter, port } = await memberOfAcmeOwningPr1()
      const read = (found: boolean) =>
        counted
          .selectNoFrom([sql<string>`'pr-1'`.as('id'), sql<Date>`now()`.as('read_at')])
          .where(sql.lit(found))
      /** The answer, and the statements it took. */
      const ask = async (user: string, relation: string, object: string, found: boolean, on = counted) => {
        counter.queries = 0
        const answer = await port.checkWithRead(tuple(user, relation, object), on, read(found))
        return { ...answer, statements: counter.queries }
      }
      for (const [user, allowed] of [
        ['user:mia', true],
        ['user:gus', false],
      ] as const) {
        const answer = await ask(user, 'can_view', 'purchase_request:pr-1', true)
        expect(answer.allowed).toBe(allowed)
        // The row as a read alone gives it: its columns only, typed by the driver.
        expect(answer.rows).toHaveLength(1)
        expect(Object.keys(answer.rows[0] ?? {}).sort()).toEqual(['id', 'read_at'])
        expect(answer.rows[0]?.id).toBe('pr-1')
        expect(answer.rows[0]?.read_at).toBeInstanceOf(Date)
        expect(answer.statements).toBe(1)
      }
      expect(await ask('user:mia', 'can_view', 'purchase_request:pr-1', false)).toEqual({
        allowed: true,
        rows: [],
        statements: 1,
      })
      // A check that needs no lookup (a userset is a member of itself): the read runs alone.
      const self = await ask('organization:acme#member', 'member', 'organization:acme', true)
      expect({ ...self, rows: self.rows.map((row) => row.id) }).toEqual({
        allowed: true,
        rows: ['pr-1'],
        statements: 1,
      })
      // Another database than the evaluator's: read there, then checked, in two statements.
      const other = await ask('user:mia', 'can_view', 'purchase_request:pr-1', true, db())
      expect({ allowed: other.allowed, statements: other.statements }).toEqual({
        allowed: true,
        statements: 2,
      })
    })
  })

  describe('a large tuple table', () => {
    const ORGANIZATIONS = 500
    const MEMBERS = 20
    const REQUESTS = 180

    it(`answers correctly over ${(ORGANIZATIONS * (MEMBERS + REQUESTS)).toLocaleString('en')} tuples`, async () => {
      const model = await readFile(MODEL_FILE, 'utf8')
      const port = embedded(model)
      const tuples: TupleKey[] = []
      for (let o = 0; o < ORGANIZATIONS; o++) {
        for (let m = 0; m < MEMBERS; m++) {
          tuples.push(tuple(`user:u${o}-${m}`, m === 0 ? 'admin' : 'member', `organization:o${o}`))
        }
        for (let r = 0; r < REQUESTS; r++) {
          tuples.push(tuple(`organization:o${o}`, 'owner_organization', `purchase_request:p${o}-${r}`))
        }
      }
      expect(tuples).toHaveLength(100_000)
      await port.write(tuples, [])
      // As autovacuum does after a bulk load. Without it (this CI's server runs with autovacuum off)
      // the statements the earlier tests prepared while the table was small keep plans made for a
      // small table: the same checks then take ten times as long.
      await sql`analyze authz_tuples`.execute(db())

      expect(await port.check(tuple('user:u7-3', 'can_view', 'purchase_request:p7-99'))).toBe(true)
      expect(await port.check(tuple('user:u7-3', 'can_edit', 'purchase_request:p7-99'))).toBe(false)
      expect(await port.check(tuple('user:u7-0', 'can_edit', 'purchase_request:p7-99'))).toBe(true)
      expect(await port.check(tuple('user:u8-3', 'can_view', 'purchase_request:p7-99'))).toBe(false)
      expect(await port.check(tuple('user:u8-0', 'can_edit', 'purchase_request:p7-99'))).toBe(false)

      const sample = Array.from({ length: 1000 }, (_, i) => ({
        user: `user:u${(i * 7) % ORGANIZATIONS}-${i % MEMBERS}`,
        organization: (i * 7) % ORGANIZATIONS,
        owner: (i * 13) % ORGANIZATIONS,
        request: i % REQUESTS,
      }))
      const answers: boolean[] = []
      for (const s of sample) {
        answers.push(await port.check(tuple(s.user, 'can_view', `purchase_request:p${s.owner}-${s.request}`)))
      }
      expect(answers).toEqual(sample.map((s) => s.organization === s.owner))
      // 100,000 rows written and 1,000 checks made one after another: about 5 s alone, and more
      // beside the suite's load tests on two cores. Correctness, not time, is asserted.
    }, 60_000)
  })

  describe('conditions (not evaluated yet)', () => {
    const GRANT = `condition non_expired_grant(current_time: timestamp, grant_time: timestamp, grant_duration: duration) {
  current_time < grant_time + grant_duration
}
`
    const CONDITIONAL = `model
  schema 1.1
type user
type group
  relations
    define member: [user]
type document
  relations
    define viewer: [user with non_expired_grant]
    define editor: [user, user with non_expired_grant]
    define reader: [group#member with non_expired_grant, user:* with non_expired_grant]

${GRANT}`

    it('refuses at start-up a model that uses a condition, naming it', () => {
      let refusal: unknown
      try {
        embedded(CONDITIONAL)
      } catch (error) {
        refusal = error
      }
      expect(refusal).toBeInstanceOf(UnsupportedModelError)
      expect((refusal as Error).message).toContain('non_expired_grant')
      expect((refusal as Error).message).toContain('document#viewer')
    })

    it('refuses a model that only defines a condition', () => {
      const definedOnly = `model
  schema 1.1
type user
type document
  relations
    define viewer: [user]

${GRANT}`
      expect(() => embedded(definedOnly)).toThrow(/conditions.*non_expired_grant/)
    })

    it("still loads the project's own model", async () => {
      const port = new EmbeddedAuthorization(db(), new ModelIndex(await loadModel()))
      await port.write([tuple('user:ada', 'member', 'organization:o')], [])
      expect(await port.check(tuple('user:ada', 'member', 'organization:o'))).toBe(true)
    })

    // The write path's validation, on the model the evaluator refuses: a tuple (they carry no
    // condition here) is refused where the model admits its user only with a condition, as OpenFGA.
    describe('tuple validation', () => {
      const model = new ModelIndex(parseModel(CONDITIONAL))

      it('refuses a tuple without the condition its relation requires', () => {
        for (const bad of [
          tuple('user:anne', 'viewer', 'document:plan'),
          tuple('group:eng#member', 'reader', 'document:plan'),
          tuple('user:*', 'reader', 'document:plan'),
        ]) {
          expect(() => writableTuple(model, bad), JSON.stringify(bad)).toThrow(AuthorizationRequestError)
          expect(() => writableTuple(model, bad), JSON.stringify(bad)).toThrow(
            /with a condition \(non_expired_grant\)/,
          )
        }
      })

      it('accepts a tuple without a condition where the model also admits its user without one', () => {
        expect(writableTuple(model, tuple('user:anne', 'editor', 'document:plan'))).toMatchObject({
          object_type: 'document',
          object_id: 'plan',
          relation: 'editor',
          subject_type: 'user',
          subject_id: 'anne',
        })
      })

      it('still refuses a user type the relation does not name at all', () => {
        expect(() => writableTuple(model, tuple('group:eng#member', 'viewer', 'document:plan'))).toThrow(
          /cannot be related to "document#viewer": it admits user with non_expired_grant/,
        )
      })
    })
  })
})
