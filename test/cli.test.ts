import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import type { Kysely } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { initializeOpenFga } from '../src/authz/init.ts'
import { loadModel } from '../src/authz/model.ts'
import { openPGlite } from '../src/db/database.ts'
import type { Database } from '../src/db/schema.ts'
import { findOrganization } from '../src/features/organizations/repository.ts'
import { testSecret } from './helpers/app.ts'
import { createTestDatabase, type TestDatabase } from './helpers/database.ts'
import { FakeOpenFga } from './helpers/fake-openfga.ts'
import { runNode } from './helpers/process.ts'
import { closedPort } from './helpers/smtp.ts'

// Each CLI command is a process that starts the app on the embedded database (about 5 s on PGlite
// on a loaded 2-core machine), and a test runs up to five of them in sequence.
const CLI_TEST_TIMEOUT_MS = 90_000

// The CLI runs as a real process against this file's database: real PostgreSQL with
// TEST_DATABASE_URL, otherwise an embedded PGlite directory of its own.
let database: TestDatabase | undefined
let dataDir: string
let env: Record<string, string>

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'platform-cli-'))
  env = { PLATFORM_AUTH_JWT_SECRET: testSecret(), PLATFORM_DATA_DIR: dataDir, LOG_LEVEL: 'warn' }
  if (process.env.TEST_DATABASE_URL) {
    database = await createTestDatabase({ migrated: false, poolSize: 2 })
    env.PLATFORM_DATASOURCE_URL = database.url as string
  }
})

afterAll(async () => {
  await database?.dispose()
  await rm(dataDir, { recursive: true, force: true })
})

const cli = (...args: string[]) => runNode('src/cli.ts', args, env).done

/**
 * Runs `work` on this file's database while CLI commands run beside it: PostgreSQL's own handle, or
 * the embedded directory opened here, whose holder then serves it to the CLI's processes.
 */
async function besideTheCli<T>(work: (db: Kysely<Database>) => Promise<T>): Promise<T> {
  if (database) return work(database.handle.db)
  const handle = await openPGlite(path.join(dataDir, 'pglite'))
  try {
    return await work(handle.db)
  } finally {
    await handle.close()
  }
}

describe('operations CLI', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('migrates and reports what it applied, then nothing the second time', async () => {
    const first = await cli('migrate')
    expect(first.stderr).toBe('')
    expect(first.code).toBe(0)
    expect(JSON.parse(first.stdout).applied).toContain('0001_organizations')
    const second = await cli('migrate')
    expect(JSON.parse(second.stdout)).toEqual({ applied: [] })
  })

  it('creates an organization and prints its id', async () => {
    const result = await cli('org', 'create', '--name', 'Acme Corp')
    expect(result.code).toBe(0)
    const { organizationId } = JSON.parse(result.stdout)
    expect(organizationId).toMatch(/^[0-9a-f-]{36}$/)
    if (database) {
      expect(await findOrganization(database.handle.db, organizationId)).toMatchObject({ name: 'Acme Corp' })
    }
  })

  it('creates an active user with a hashed password, read from stdin when asked', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Users Inc')).stdout).organizationId
    const created = await cli(
      'user',
      'create',
      '--org',
      org,
      '--email',
      'Ops@Example.com',
      '--role',
      'admin',
      '--password',
      'correct horse battery',
    )
    expect(created.stderr).toBe('')
    expect(JSON.parse(created.stdout).userId).toMatch(/^[0-9a-f-]{36}$/)
    const duplicate = await cli(
      'user',
      'create',
      '--org',
      org,
      '--email',
      'ops@example.com',
      '--role',
      'member',
      '--password',
      'another long password',
    )
    expect(JSON.parse(duplicate.stderr)).toMatchObject({ code: 'ACCOUNT_EXISTS' })
    const weak = await cli(
      'user',
      'create',
      '--org',
      org,
      '--email',
      'weak@example.com',
      '--role',
      'member',
      '--password',
      'short',
    )
    expect(JSON.parse(weak.stderr)).toMatchObject({ code: 'WEAK_PASSWORD' })
    const piped = runNode(
      'src/cli.ts',
      [
        'user',
        'create',
        '--org',
        org,
        '--email',
        'stdin@example.com',
        '--role',
        'member',
        '--password-stdin',
      ],
      env,
      'piped password 1234\n',
    )
    const result = await piped.done
    expect(result.stderr).toBe('')
    const userId = JSON.parse(result.stdout).userId
    if (database) {
      const row = await database.handle.db
        .selectFrom('accounts')
        .selectAll()
        .where('id', '=', userId)
        .executeTakeFirstOrThrow()
      expect(row).toMatchObject({
        email: 'stdin@example.com',
        role: 'member',
        active: true,
        organization_id: org,
      })
      expect(row.password_hash).toMatch(/^\$argon2id\$/)
      expect(row.password_hash).not.toContain('piped password')
    }
  })

  it.each([
    [
      [
        'user',
        'create',
        '--org',
        'not-a-uuid',
        '--email',
        'a@b.co',
        '--role',
        'admin',
        '--password',
        'long enough password',
      ],
      'USAGE',
      /--org/,
    ],
    [
      [
        'user',
        'create',
        '--org',
        '00000000-0000-4000-8000-000000000000',
        '--email',
        'a@b.co',
        '--role',
        'owner',
        '--password',
        'long enough password',
      ],
      'USAGE',
      /--role/,
    ],
    [
      [
        'user',
        'create',
        '--org',
        '00000000-0000-4000-8000-000000000000',
        '--email',
        'a@b.co',
        '--role',
        'admin',
        '--password',
        'long enough password',
      ],
      'NOT_FOUND',
      /organization/,
    ],
    [['org', 'create'], 'USAGE', /--name is required/],
    [['org', 'create', '--name', '   '], 'USAGE', /--name is required/],
    [['org', 'create', '--name', 'x'.repeat(201)], 'VALIDATION_FAILED', /1 to 200/],
    [['org', 'create', '--colour', 'red'], 'USAGE', /colour/],
    [['launch-rockets'], 'USAGE', /usage: npm run cli/],
  ])('fails %j with a JSON error on stderr and a non-zero exit', async (args, code, message) => {
    const result = await cli(...args)
    expect(result.code).not.toBe(0)
    expect(result.stdout).toBe('')
    const error = JSON.parse(result.stderr.trim().split('\n').pop() as string)
    expect(error.code).toBe(code)
    expect(error.message).toMatch(message)
  })

  it('fails on invalid configuration naming the property', async () => {
    const result = await runNode('src/cli.ts', ['migrate'], { ...env, PLATFORM_SERVER_PORT: 'x' }).done
    expect(result.code).toBe(1)
    expect(JSON.parse(result.stderr)).toMatchObject({
      code: 'CONFIGURATION_INVALID',
      message: expect.stringContaining('platform.server.port'),
    })
  })
})

describe('operators see what exists', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('lists organizations and their users, and unlocks an account by email', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Listed Ltd')).stdout).organizationId
    const user = await runNode(
      'src/cli.ts',
      [
        'user',
        'create',
        '--org',
        org,
        '--email',
        'listed@example.com',
        '--role',
        'admin',
        '--password-stdin',
      ],
      env,
      'a long enough password\n',
    ).done
    const { userId } = JSON.parse(user.stdout)

    const orgs = JSON.parse((await cli('org', 'list')).stdout)
    expect(orgs.items).toContainEqual({ organizationId: org, name: 'Listed Ltd' })

    const users = JSON.parse((await cli('user', 'list', '--org', org)).stdout)
    expect(users).toEqual({
      items: [
        {
          userId,
          email: 'listed@example.com',
          role: 'admin',
          active: true,
          otpEnabled: false,
          lockedUntil: null,
        },
      ],
    })

    const unlocked = await cli('user', 'unlock', '--email', 'LISTED@example.com')
    expect(unlocked.code).toBe(0)
    expect(JSON.parse(unlocked.stdout)).toEqual({ userId, unlocked: true })
    const unknown = await cli('user', 'unlock', '--email', 'nobody@example.com')
    expect(unknown.code).not.toBe(0)
    expect(JSON.parse(unknown.stderr).code).toBe('NOT_FOUND')
  })

  it('unlocks a locked account as an admin would, recording user.unlocked with the system as actor', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Unlocked Ltd')).stdout).organizationId
    const created = await runNode(
      'src/cli.ts',
      [
        'user',
        'create',
        '--org',
        org,
        '--email',
        'locked@example.com',
        '--role',
        'member',
        '--password-stdin',
      ],
      env,
      'a long enough password\n',
    ).done
    const { userId } = JSON.parse(created.stdout)
    // Locked an hour ahead, so the lock is in force whenever the command runs.
    const until = new Date(Date.now() + 3_600_000)
    const { notLocked, account, events } = await besideTheCli(async (db) => {
      const unlock = async (failures: { failed_attempts: number; locked_until: Date | null }) => {
        await db
          .updateTable('accounts')
          .set({ ...failures, refused_attempts: 2 })
          .where('id', '=', userId)
          .execute()
        const unlocked = await cli('user', 'unlock', '--email', 'Locked@Example.com')
        expect(unlocked.code, unlocked.stderr).toBe(0)
        expect(JSON.parse(unlocked.stdout)).toEqual({ userId, unlocked: true })
        return db.selectFrom('accounts').selectAll().where('id', '=', userId).executeTakeFirstOrThrow()
      }
      // Not locked: the failure count is cleared all the same, and nothing is recorded.
      const notLocked = await unlock({ failed_attempts: 2, locked_until: null })
      const account = await unlock({ failed_attempts: 5, locked_until: until })
      const events = await db
        .selectFrom('audit_events')
        .selectAll()
        .where('chain', '=', org)
        .where('type', '=', 'user.unlocked')
        .execute()
      return { notLocked, account, events }
    })
    expect(notLocked).toMatchObject({ locked_until: null, failed_attempts: 0, refused_attempts: 0 })
    expect(account).toMatchObject({ locked_until: null, failed_attempts: 0, refused_attempts: 0 })
    // One event, for the lock that was in force; none for the count cleared without a lock.
    expect(events).toEqual([
      expect.objectContaining({
        organization_id: org,
        actor_type: 'system',
        actor_id: null,
        subject_type: 'user',
        subject_id: userId,
        data: { lockedUntil: until.toISOString() },
      }),
    ])
    // The event is on the organization's chain like any other: the chain still verifies.
    const verified = await cli('audit', 'verify', '--org', org)
    expect(verified.code, verified.stderr).toBe(0)
  })

  it('deactivates a user as an admin would, keeping the last active admin', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Deactivated Ltd')).stdout).organizationId
    const create = async (email: string, role: string) =>
      JSON.parse(
        (
          await runNode(
            'src/cli.ts',
            ['user', 'create', '--org', org, '--email', email, '--role', role, '--password-stdin'],
            env,
            'a long enough password\n',
          ).done
        ).stdout,
      ).userId as string
    const admin = await create('only-admin@example.com', 'admin')
    const member = await create('leaving@example.com', 'member')

    const deactivated = await cli('user', 'deactivate', '--id', member)
    expect(deactivated.code, deactivated.stderr).toBe(0)
    expect(JSON.parse(deactivated.stdout)).toEqual({ userId: member, organizationId: org, active: false })
    const again = await cli('user', 'deactivate', '--id', member)
    expect(JSON.parse(again.stdout)).toEqual({ userId: member, organizationId: org, active: false })

    const lastAdmin = await cli('user', 'deactivate', '--id', admin)
    expect(lastAdmin.code).not.toBe(0)
    expect(JSON.parse(lastAdmin.stderr).code).toBe('LAST_ADMIN')
    const unknown = await cli('user', 'deactivate', '--id', '00000000-0000-4000-8000-000000000000')
    expect(JSON.parse(unknown.stderr).code).toBe('NOT_FOUND')

    const users = JSON.parse((await cli('user', 'list', '--org', org)).stdout).items
    expect(users.map((u: { email: string; active: boolean }) => [u.email, u.active])).toEqual([
      ['leaving@example.com', false],
      ['only-admin@example.com', true],
    ])
  })

  it('verifies an organization’s audit chain, and names where it breaks', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Audited Ltd')).stdout).organizationId
    for (const description of ['one', 'two', 'three'])
      expect(
        (await cli('api-key', 'create', '--org', org, '--scopes', 'files:read', '--description', description))
          .code,
      ).toBe(0)
    const clean = await cli('audit', 'verify', '--org', org)
    expect(clean.code, clean.stderr).toBe(0)
    expect(JSON.parse(clean.stdout)).toMatchObject({
      chain: org,
      events: 3,
      head: { sequence: 3 },
      unchained: 0,
    })
    expect((await cli('audit', 'verify', '--org', 'not-an-org')).code).toBe(2)
    // Edited behind the service's back: only on PostgreSQL can the test reach the rows meanwhile.
    if (!database) return
    await database.handle.db
      .updateTable('audit_events')
      .set({ data: JSON.stringify({ keyPrefix: 'sk_live_forged' }) })
      .where('chain', '=', org)
      .where('sequence', '=', '2' as never)
      .execute()
    const broken = await cli('audit', 'verify', '--org', org)
    expect(broken.code).toBe(1)
    expect(JSON.parse(broken.stderr)).toMatchObject({ code: 'AUDIT_CHAIN_BROKEN' })
    expect(JSON.parse(broken.stderr).message).toMatch(/sequence 2/)
  })

  it('prints --help as plain text and exits 0', async () => {
    const help = await cli('--help')
    expect(help.code).toBe(0)
    expect(help.stdout).toMatch(/^usage: npm run cli -- <command>/)
    expect(help.stdout).toContain('user unlock --email E')
    expect(help.stdout).toContain('org list')
    expect(() => JSON.parse(help.stdout)).toThrow()
  })

  it('reports what each outbox holds and lists the dead letters with their errors', async () => {
    const before = JSON.parse((await cli('outbox', 'status')).stdout)
    expect(before.outboxes).toEqual([
      { kind: 'mail', pending: expect.any(Number), deadLetters: expect.any(Number) },
      { kind: 'authz', pending: expect.any(Number), deadLetters: expect.any(Number) },
      { kind: 'webhook', pending: expect.any(Number), deadLetters: expect.any(Number) },
    ])
    if (!database) return
    // On PostgreSQL the test can write beside the CLI: one mail given up, one change the model rejected.
    const now = new Date()
    await database.handle.db
      .insertInto('mail_outbox')
      .values({
        template: 'password_reset',
        recipient: 'a@example.com',
        data: '{}',
        created_at: now,
        next_attempt_at: now,
        attempts: 20,
        failed_at: now,
        last_error: '421: try later',
      })
      .execute()
    await database.handle.db
      .insertInto('authz_outbox')
      .values({
        operation: 'write',
        subject: 'user:x',
        relation: 'nope',
        object: 'organization:y',
        created_at: now,
        next_attempt_at: now,
        processed_at: now,
        failed_at: now,
        last_error: 'rejected: no relation nope',
      })
      .execute()
    const after = JSON.parse((await cli('outbox', 'status', '--limit', '5')).stdout)
    const dead = (kind: string, report: typeof before) =>
      report.outboxes.find((o: { kind: string }) => o.kind === kind).deadLetters
    expect(dead('mail', after)).toBe(dead('mail', before) + 1)
    expect(dead('authz', after)).toBe(dead('authz', before) + 1)
    expect(after.deadLetters).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          kind: 'mail',
          what: 'password_reset',
          attempts: 20,
          lastError: '421: try later',
        }),
        expect.objectContaining({
          kind: 'authz',
          what: 'write user:x nope organization:y',
          lastError: 'rejected: no relation nope',
        }),
      ]),
    )
    expect((await cli('outbox', 'status', '--limit', '0')).code).not.toBe(0)
  })

  it('runs housekeeping once and reports what each rule removed', async () => {
    const result = await cli('housekeeping', 'run')
    expect(result.code).toBe(0)
    expect(Object.keys(JSON.parse(result.stdout).removed)).toEqual(
      expect.arrayContaining(['sessions', 'rate_limits', 'mail_outbox', 'authz_outbox']),
    )
  })
})

describe('read-your-writes with an authorization server (OpenFGA)', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  let fake: FakeOpenFga
  let openfga: { storeId: string; modelId: string }
  beforeAll(async () => {
    fake = await FakeOpenFga.start()
    openfga = await initializeOpenFga(fake.url, undefined, await loadModel())
  })
  afterAll(async () => {
    await fake.close()
  })

  const withOpenFga = (apiUrl: string) => ({
    ...env,
    PLATFORM_AUTHZ_OPENFGA_API_URL: apiUrl,
    PLATFORM_AUTHZ_OPENFGA_STORE_ID: openfga.storeId,
    PLATFORM_AUTHZ_OPENFGA_MODEL_ID: openfga.modelId,
  })

  it('delivers the tuples a command queued before it returns', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Delivered Ltd')).stdout).organizationId
    const args = [
      'api-key',
      'create',
      '--org',
      org,
      '--scopes',
      'purchase_requests:read',
      '--description',
      'd',
    ]
    const created = await runNode('src/cli.ts', args, withOpenFga(fake.url)).done
    expect(created.stderr).toBe('')
    expect(created.code).toBe(0)
    const { id } = JSON.parse(created.stdout)
    expect(fake.tuples(openfga.storeId)).toContainEqual(
      expect.objectContaining({ user: `api_key:${id}`, relation: 'member', object: `organization:${org}` }),
    )
  })

  it('says so and exits 75 when the authorization server does not answer, leaving the change queued', async () => {
    const org = JSON.parse((await cli('org', 'create', '--name', 'Queued Ltd')).stdout).organizationId
    const args = [
      'api-key',
      'create',
      '--org',
      org,
      '--scopes',
      'purchase_requests:read',
      '--description',
      'q',
    ]
    const created = await runNode('src/cli.ts', args, withOpenFga(`http://127.0.0.1:${await closedPort()}`))
      .done
    expect(created.code).toBe(75)
    // The key itself is printed: its secret is shown only once.
    const { id, rawKey } = JSON.parse(created.stdout)
    expect(rawKey).toMatch(/^sk_/)
    expect(created.stderr).toMatch(/^AUTHZ_PENDING: 1 authorization change\(s\) could not be delivered/m)
    // Delivered once the server answers: by the next command's flush here, by a server's worker in production.
    const later = await runNode('src/cli.ts', ['api-key', 'list', '--org', org], withOpenFga(fake.url)).done
    expect(later.code).toBe(0)
    expect(fake.tuples(openfga.storeId)).toContainEqual(
      expect.objectContaining({ user: `api_key:${id}`, relation: 'member', object: `organization:${org}` }),
    )
  })
})
