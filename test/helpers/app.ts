import { randomBytes } from 'node:crypto'
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, onTestFinished } from 'vitest'
import { type AppDependencies, buildApp } from '../../src/app.ts'
import type { Clock } from '../../src/clock.ts'
import { type Config, ConfigError, type ConfigSource, loadConfig } from '../../src/config.ts'
import { authzConfigFor } from './authz-adapter.ts'
import { TestClock } from './clock.ts'
import { checkRepliesAgainstDocument } from './contract.ts'
import { createTestDatabase, type TestDatabase } from './database.ts'
import { startTestS3 } from './s3.ts'

export const testSecret = (): string => randomBytes(32).toString('base64')

/** The test suite runs under the `test` profile, which alone may use a cheap password hash. */
export function testConfig(overrides: ConfigSource = {}): Config {
  return loadConfig({ 'platform.profile': 'test', 'platform.auth.jwt.secret': testSecret(), ...overrides })
}

/** The ConfigError that `fn` throws; fails the test if it throws nothing, and rethrows any other error. */
export function configErrorOf(fn: () => unknown): ConfigError {
  try {
    fn()
  } catch (error) {
    if (error instanceof ConfigError) return error
    throw error
  }
  throw new Error('expected a ConfigError')
}

/** Collects log lines so tests can assert what was (not) logged. */
export class LogCapture extends Writable {
  readonly lines: string[] = []
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void) {
    this.lines.push(...chunk.toString('utf8').split('\n').filter(Boolean))
    callback()
  }
  text(): string {
    return this.lines.join('\n')
  }
  records(): Record<string, unknown>[] {
    return this.lines.map((line) => JSON.parse(line) as Record<string, unknown>)
  }
}

export interface TestApp {
  app: FastifyInstance
  database: TestDatabase
  config: Config
  clock: TestClock
  logs: LogCapture
  close(): Promise<void>
}

export interface TestAppOptions {
  config?: ConfigSource
  /** Further dependencies (extension points, a mail transport, the worker switch). */
  deps?: Omit<AppDependencies, 'database' | 'clock' | 'logStream' | 'logLevel'>
  clock?: Clock
  /** Share a database between apps (two instances on one database). */
  database?: TestDatabase
  /** Adds routes or hooks before the app is ready. */
  configure?: (app: FastifyInstance) => void | Promise<void>
}

/** A ready app on its own database, for `inject`. Call close() when done. */
export async function createTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const database = options.database ?? (await createTestDatabase())
  // The adapter under test (TEST_AUTHZ), unless the test brings a port or an OpenFGA server of its own.
  const authz =
    options.deps?.authorization || options.config?.['platform.authz.openfga.api-url']
      ? {}
      : await authzConfigFor(database)
  // Every app needs an object store: an embedded S3 server of its own, unless the test gives one.
  const s3 =
    options.config?.['platform.storage.s3.endpoint'] || options.deps?.objectStore ? null : await startTestS3()
  const config = testConfig({
    'platform.datasource.migrate-on-start': 'false',
    ...s3?.config,
    ...authz,
    ...options.config,
  })
  const clock = (options.clock as TestClock | undefined) ?? new TestClock()
  const logs = new LogCapture()
  let app: FastifyInstance
  try {
    // The outbox workers do not poll in tests: they deliver with `runOnce()`.
    app = await buildApp(config, {
      startMailWorker: false,
      startAuthzWorker: false,
      startHousekeeping: false,
      startWebhookWorker: false,
      ...options.deps,
      database: database.handle,
      clock,
      logStream: logs,
      logLevel: 'info',
    })
    // Installed before the test's own routes, which it leaves unchecked: they are not the product's.
    checkRepliesAgainstDocument(app)
    await options.configure?.(app)
    await app.ready()
  } catch (error) {
    await s3?.close()
    throw error
  }
  return {
    app,
    database,
    config,
    clock,
    logs,
    close: async () => {
      await app.close()
      await s3?.close()
      if (!options.database) await database.dispose()
    },
  }
}

/** A ready app on `t`'s database and object store from buildApp itself (workers on, no logs); close it. */
export async function buildAppBeside(
  t: TestApp,
  config: ConfigSource,
  deps: Omit<AppDependencies, 'database' | 'clock' | 'logStream' | 'logLevel'>,
): Promise<FastifyInstance> {
  const app = await buildApp(
    {
      ...testConfig({
        'platform.datasource.migrate-on-start': 'false',
        'platform.auth.jwt.secret': t.config.auth.jwt.secret,
        ...config,
      }),
      storage: t.config.storage,
      authz: t.config.authz,
    },
    {
      ...deps,
      database: t.database.handle,
      clock: new TestClock(),
      logStream: new LogCapture(),
      logLevel: 'silent',
    },
  )
  await app.ready()
  return app
}

/** A test app for the running test only: closed when the test finishes. */
export async function createTestAppForTest(options: TestAppOptions = {}): Promise<TestApp> {
  const t = await createTestApp(options)
  onTestFinished(() => t.close())
  return t
}

/** Registers a test app for the whole file: built before the tests, closed after. */
export function useTestApp(options: TestAppOptions = {}): TestApp {
  const holder = {} as TestApp
  beforeAll(async () => {
    Object.assign(holder, await createTestApp(options))
  })
  afterAll(async () => {
    await holder.close?.()
  })
  return holder
}

type BesideOptions = Omit<TestAppOptions, 'database'>

/** Registers a further instance on `t`'s database for the enclosing describe; options may wait for `t`. */
export function useTestAppBeside(t: TestApp, options: BesideOptions | (() => BesideOptions) = {}): TestApp {
  const holder = {} as TestApp
  beforeAll(async () => {
    const resolved = typeof options === 'function' ? options() : options
    // Another instance of the same deployment: it shares the secret (sealed outbox mail, tokens).
    const config = { 'platform.auth.jwt.secret': t.config.auth.jwt.secret, ...resolved.config }
    Object.assign(holder, await createTestApp({ ...resolved, config, database: t.database }))
  })
  afterAll(async () => {
    await holder.close?.()
  })
  return holder
}
