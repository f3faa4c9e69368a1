import { existsSync } from 'node:fs'
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { freePort } from '../../src/lifecycle.ts'
import { spawnDaemon } from './process.ts'

// A real PgBouncer (Debian's pgbouncer package, which CI installs) in front of the test
// PostgreSQL, on a free loopback port, with its ini and userlist in a folder of its own. Trust
// authentication (the test server trusts 127.0.0.1). PgBouncer will not run as root: as root it
// is started with `-u postgres`, so its folder is readable by that user.

export const PGBOUNCER = process.env.PGBOUNCER_BIN ?? '/usr/sbin/pgbouncer'
export const pgbouncerInstalled = (): boolean => existsSync(PGBOUNCER)

export interface PgBouncer {
  port: number
  /** The URL of `database` through the pooler (same user, host 127.0.0.1, the pooler's port). */
  urlOf(database: string): string
  /** Rows of a command of PgBouncer's admin console (`SHOW CLIENTS`, `SHOW POOLS`). */
  admin(command: string): Promise<Record<string, unknown>[]>
  /** What the process wrote so far, for failure messages. */
  output(): string
  stop(): Promise<void>
}

export interface PgBouncerOptions {
  /** The PostgreSQL server behind it: `postgres://user@host:port/...` (the path is ignored). */
  serverUrl: string
  poolMode?: 'transaction' | 'session'
  /** Server connections per database and user. */
  poolSize?: number
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const server = new URL(options.serverUrl)
  const user = decodeURIComponent(server.username || 'postgres')
  const port = await freePort()
  const dir = await mkdtemp(path.join(tmpdir(), 'platform-pgbouncer-'))
  await chmod(dir, 0o755)
  const ini = path.join(dir, 'pgbouncer.ini')
  const userlist = path.join(dir, 'userlist.txt')
  await writeFile(userlist, `"${user}" ""\n`, { mode: 0o644 })
  await writeFile(
    ini,
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || '5432'}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${userlist}`,
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 10}`,
      'max_client_conn = 500',
      // node-postgres sends these as start-up parameters; the pooler cannot set them per client.
      'ignore_startup_parameters = statement_timeout,idle_in_transaction_session_timeout',
      'server_reset_query =',
      `admin_users = ${user}`,
      'log_connections = 0',
      'log_disconnections = 0',
      '',
    ].join('\n'),
    { mode: 0o644 },
  )
  const asRoot = process.getuid?.() === 0
  const {
    child,
    output: outputOf,
    exited: hasExited,
    done,
  } = spawnDaemon(PGBOUNCER, [...(asRoot ? ['-u', 'postgres'] : []), ini])
  const deadline = Date.now() + 10_000
  while (!(await accepts(port))) {
    if (hasExited() || Date.now() > deadline) {
      child.kill('SIGKILL')
      await rm(dir, { recursive: true, force: true })
      throw new Error(`pgbouncer did not start:\n${outputOf()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return {
    port,
    urlOf: (database) =>
      `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${encodeURIComponent(database)}`,
    admin: async (command) => {
      const client = new pg.Client({
        connectionString: `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/pgbouncer`,
      })
      await client.connect()
      try {
        return (await client.query(command)).rows
      } finally {
        await client.end()
      }
    },
    output: outputOf,
    stop: async () => {
      // SIGTERM: PgBouncer's immediate shutdown (the test's clients are closed by then).
      if (!hasExited()) child.kill('SIGTERM')
      await done
      await rm(dir, { recursive: true, force: true })
    },
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}
