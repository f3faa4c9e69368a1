// Operations CLI (`npm run cli -- <command>`): the server's configuration, one JSON
// object on stdout, `{code, message}` on stderr and a non-zero exit on failure.
import { parseArgs } from 'node:util'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.ts'
import { SYSTEM_CHAIN, verifyStoredChain } from './audit/index.ts'
import { authzInit } from './authz/init.ts'
import { type ConfigSource, configFromEnv, loadConfig } from './config.ts'
import { migrateDatabase } from './db/plugin.ts'
import { developmentSecret } from './dev-secret.ts'
import { AppError } from './errors.ts'
import { listAccounts } from './features/accounts/index.ts'
import { createOrganization, listOrganizations } from './features/organizations/index.ts'
import { listDeadLetters, outboxCounts } from './outbox/status.ts'
import { startEmbeddedStorage } from './storage/embedded-s3.ts'
import { isUuid } from './uuid.ts'

interface Command {
  usage: string
  /** Whether the app migrates while starting; `migrate` does it itself to report what it applied. */
  migrateOnStart: boolean
  options: Record<string, { type: 'string' | 'boolean' }>
  run(app: FastifyInstance, values: Record<string, string | boolean | undefined>): Promise<unknown>
}

class UsageError extends Error {}

/** A command's own failure, with the code stderr reports (exit 1). */
class CommandFailure extends Error {
  readonly code: string
  constructor(code: string, message: string) {
    super(message)
    this.code = code
  }
}

function required(values: Record<string, string | boolean | undefined>, name: string): string {
  const value = values[name]
  if (typeof value !== 'string' || value.trim() === '') throw new UsageError(`--${name} is required`)
  return value
}

const commands: Record<string, Command> = {
  migrate: {
    usage: 'migrate',
    migrateOnStart: false,
    options: {},
    run: async (app) => ({ applied: await migrateDatabase(app.config, app.database) }),
  },
  'org create': {
    usage: 'org create --name NAME',
    migrateOnStart: true,
    options: { name: { type: 'string' } },
    run: async (app, values) => {
      const organization = await createOrganization(app.db, { name: required(values, 'name') })
      return { organizationId: organization.id }
    },
  },
  'org list': {
    usage: 'org list',
    migrateOnStart: true,
    options: {},
    run: async (app) => ({
      items: (await listOrganizations(app.db)).map((o) => ({ organizationId: o.id, name: o.name })),
    }),
  },
  'user list': {
    usage: 'user list --org ORG',
    migrateOnStart: true,
    options: { org: { type: 'string' } },
    run: async (app, values) => {
      const organizationId = required(values, 'org')
      if (!isUuid(organizationId)) throw new UsageError('--org must be an organization id (UUID)')
      const now = app.clock.now()
      return {
        items: (await listAccounts(app.db, organizationId)).map((a) => ({
          userId: a.id,
          email: a.email,
          role: a.role,
          active: a.active,
          otpEnabled: a.otp_enabled,
          lockedUntil: a.locked_until && a.locked_until > now ? a.locked_until.toISOString() : null,
        })),
      }
    },
  },
  'user unlock': {
    usage: 'user unlock --email E',
    migrateOnStart: true,
    options: { email: { type: 'string' } },
    // As an admin's unlock, recorded as the system's `user.unlocked`; without a lock in force, the
    // failure count is cleared all the same.
    run: async (app, values) => {
      const { userId } = await app.services.users.unlockByOperator(required(values, 'email'))
      return { userId, unlocked: true }
    },
  },
  'user deactivate': {
    usage: 'user deactivate --id USER',
    migrateOnStart: true,
    options: { id: { type: 'string' } },
    // As an admin's deactivation: sessions end on every instance, links die, the role tuple goes.
    run: async (app, values) => {
      const id = required(values, 'id')
      if (!isUuid(id)) throw new UsageError('--id must be a user id (UUID)')
      return app.services.users.deactivateByOperator(id)
    },
  },
  'housekeeping run': {
    usage: 'housekeeping run',
    migrateOnStart: true,
    options: {},
    run: async (app) => ({ removed: await app.housekeeping.runOnce() }),
  },
  'user create': {
    usage: 'user create --org ORG --email E --role admin|member (--password P | --password-stdin)',
    migrateOnStart: true,
    options: {
      org: { type: 'string' },
      email: { type: 'string' },
      role: { type: 'string' },
      password: { type: 'string' },
      'password-stdin': { type: 'boolean' },
    },
    run: async (app, values) => {
      const role = required(values, 'role')
      if (role !== 'admin' && role !== 'member') throw new UsageError('--role must be admin or member')
      const organizationId = required(values, 'org')
      if (!isUuid(organizationId)) throw new UsageError('--org must be an organization id (UUID)')
      const password = values['password-stdin'] ? await readStdin() : required(values, 'password')
      const account = await app.services.users.create({
        organizationId,
        email: required(values, 'email'),
        role,
        password,
      })
      return { userId: account.id }
    },
  },
  'authz init': {
    usage: 'authz init',
    migrateOnStart: false,
    options: {},
    // Creates the store and model the app needs before it can start, so main() runs it without the app.
    run: async (app) => authzInit(app.config),
  },
  'api-key create': {
    usage: 'api-key create --org ORG --scopes a,b --description D [--expires-at ISO]',
    migrateOnStart: true,
    options: {
      org: { type: 'string' },
      scopes: { type: 'string' },
      description: { type: 'string' },
      'expires-at': { type: 'string' },
    },
    run: async (app, values) => {
      const organizationId = required(values, 'org')
      if (!isUuid(organizationId)) throw new UsageError('--org must be an organization id (UUID)')
      return app.services.apiKeys.create({
        organizationId,
        scopes: list(required(values, 'scopes')),
        description: required(values, 'description'),
        expiresAt: instant(values['expires-at'], 'expires-at'),
      })
    },
  },
  'api-key revoke': {
    usage: 'api-key revoke --id ID',
    migrateOnStart: true,
    options: { id: { type: 'string' } },
    run: async (app, values) => {
      const id = required(values, 'id')
      if (!isUuid(id)) throw new UsageError('--id must be an API key id (UUID)')
      return app.services.apiKeys.revoke(id)
    },
  },
  'api-key list': {
    usage: 'api-key list --org ORG',
    migrateOnStart: true,
    options: { org: { type: 'string' } },
    run: async (app, values) => {
      const organizationId = required(values, 'org')
      if (!isUuid(organizationId)) throw new UsageError('--org must be an organization id (UUID)')
      return { items: await app.services.apiKeys.list(organizationId) }
    },
  },
  'service-account create': {
    usage: 'service-account create --client-id C --description D --scopes a,b',
    migrateOnStart: true,
    options: { 'client-id': { type: 'string' }, description: { type: 'string' }, scopes: { type: 'string' } },
    run: async (app, values) =>
      app.services.serviceAccounts.create({
        clientId: required(values, 'client-id'),
        description: required(values, 'description'),
        scopes: list(required(values, 'scopes')),
      }),
  },
  'service-account disable': {
    usage: 'service-account disable --client-id C',
    migrateOnStart: true,
    options: { 'client-id': { type: 'string' } },
    run: async (app, values) => app.services.serviceAccounts.disable(required(values, 'client-id')),
  },
  'audit verify': {
    usage: 'audit verify --org ORG|system',
    migrateOnStart: true,
    options: { org: { type: 'string' } },
    // Recomputes the organization's chain; a broken one names its first bad sequence and fails.
    run: async (app, values) => {
      const org = required(values, 'org')
      if (org !== SYSTEM_CHAIN && !isUuid(org))
        throw new UsageError('--org must be an organization id (UUID) or system')
      const result = await verifyStoredChain(app.db, app.services.audit.keys, org)
      if (!result.ok)
        throw new CommandFailure(
          'AUDIT_CHAIN_BROKEN',
          `The audit chain of ${org} breaks at sequence ${result.sequence}: ${result.reason}`,
        )
      // Events written but not chained yet (the chainer of a running instance links them moments
      // later) are named, not verified.
      return { chain: org, events: result.events, head: result.head, unchained: result.unchained }
    },
  },
  'outbox status': {
    usage: 'outbox status [--limit N]',
    migrateOnStart: true,
    options: { limit: { type: 'string' } },
    run: async (app, values) => {
      const limit = Number(values.limit ?? 20)
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw new UsageError('--limit must be 1 to 1000')
      // What each outbox holds, and the latest dead letters with the error that ended them.
      return { outboxes: await outboxCounts(app.db), deadLetters: await listDeadLetters(app.db, limit) }
    },
  },
}

const list = (value: string) =>
  value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)

function instant(value: string | boolean | undefined, name: string): Date | null {
  if (value === undefined) return null
  const date = new Date(String(value))
  if (typeof value !== 'string' || Number.isNaN(date.getTime()))
    throw new UsageError(`--${name} must be an ISO-8601 timestamp`)
  return date
}

/** How long a command waits for its authorization changes to be delivered. */
const AUTHZ_FLUSH_MS = 5_000
/** Exit status when they could not be (EX_TEMPFAIL): the command's change is made but not yet in effect. */
const EXIT_AUTHZ_PENDING = 75

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '')
}

function usage(): string {
  return `usage: npm run cli -- <command>\n${Object.values(commands)
    .map((c) => `  ${c.usage}`)
    .join('\n')}`
}

async function configSource(): Promise<ConfigSource> {
  const source = configFromEnv(process.env)
  // Outside production, reuse the secret `npm run dev` keeps, so operations work on the dev setup.
  if (!source['platform.auth.jwt.secret'] && source['platform.profile'] !== 'production') {
    source['platform.auth.jwt.secret'] = await developmentSecret(source['platform.data-dir'] ?? '.data')
  }
  return source
}

function fail(code: string, message: string): never {
  process.stderr.write(`${JSON.stringify({ code, message })}\n`)
  process.exit(code === 'USAGE' ? 2 : 1)
}

async function main(argv: string[]) {
  if (argv.includes('--help') || argv.includes('-h') || argv[0] === 'help') {
    process.stdout.write(`${usage()}\n`)
    return
  }
  const name = [argv.slice(0, 2).join(' '), argv[0] ?? ''].find((candidate) => candidate in commands)
  const command = name === undefined ? undefined : commands[name]
  if (!name || !command) fail('USAGE', usage())
  const args = argv.slice(name.split(' ').length)
  let values: Record<string, string | boolean | undefined>
  try {
    values = parseArgs({ args, options: command.options, strict: true, allowPositionals: false }).values
  } catch (error) {
    fail('USAGE', `${(error as Error).message}\n${usage()}`)
  }
  const source = await configSource()
  source['platform.datasource.migrate-on-start'] = String(command.migrateOnStart)
  let config = loadConfig(source)
  if (name === 'authz init') {
    process.stdout.write(`${JSON.stringify(await authzInit(config))}\n`)
    return
  }
  const embeddedS3 = await startEmbeddedStorage(config)
  if (embeddedS3) config = loadConfig({ ...source, ...embeddedS3.configSource() })
  // Mail a command queues stays in the outbox for the server's worker to send.
  const app = await buildApp(config, {
    logLevel: process.env.LOG_LEVEL ?? 'warn',
    logStream: process.stderr,
    startMailWorker: false,
    startWebhookWorker: false,
    startAuthzWorker: false,
    startHousekeeping: false,
  })
  try {
    await app.ready()
    const result = await command.run(app, values)
    // Read-your-writes: tuple changes the command queued for an authorization server are delivered
    // before it returns (the embedded evaluator applied them in the command's own transaction).
    const { pending, lastError } = await app.authz.outbox.flush(AUTHZ_FLUSH_MS)
    // Printed even so: it may carry a secret shown only once.
    process.stdout.write(`${JSON.stringify(result)}\n`)
    if (pending > 0) {
      process.stderr.write(
        `AUTHZ_PENDING: ${pending} authorization change(s) could not be delivered (${lastError ?? 'the authorization server did not answer'}); they stay queued and a running server delivers them once the authorization server answers, until then the change is not in effect\n`,
      )
      process.exitCode = EXIT_AUTHZ_PENDING
    }
  } finally {
    await app.close()
    await embeddedS3?.close()
  }
}

try {
  await main(process.argv.slice(2))
} catch (error) {
  if (error instanceof UsageError) fail('USAGE', `${error.message}\n${usage()}`)
  if (error instanceof AppError || error instanceof CommandFailure) fail(error.code, error.message)
  if (error instanceof Error && error.name === 'ConfigError') fail('CONFIGURATION_INVALID', error.message)
  if (error instanceof Error && error.name === 'EmbeddedDatabaseBusyError')
    fail('DATABASE_HELD', error.message)
  fail('INTERNAL_ERROR', error instanceof Error ? error.message : String(error))
}
