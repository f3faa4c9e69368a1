import { execFile } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { freePort } from '../../src/lifecycle.ts'

// A PostgreSQL cluster of the test's own (initdb, pg_ctl start/stop), for faults that only a real
// server shows: a fast shutdown terminates every session with 57P01, an immediate one drops them
// without a word and recovers from its WAL on the next start, and a stopped server refuses
// connections. The binaries come from the machine's PostgreSQL (Debian's postgresql package, which
// CI installs); PG_BINDIR names another folder. PostgreSQL will not run as root: as root, the
// cluster belongs to the `postgres` user and every command runs as it (runuser).

const run = promisify(execFile)

/** The folder of initdb and pg_ctl: PG_BINDIR, else the newest /usr/lib/postgresql/<version>/bin. */
export function postgresBinaries(): string | null {
  if (process.env.PG_BINDIR) return process.env.PG_BINDIR
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return null
  const versions = readdirSync(root)
    .filter((name) => existsSync(path.join(root, name, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a))
  return versions[0] ? path.join(root, versions[0], 'bin') : null
}

export interface PostgresCluster {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` */
  url: string
  port: number
  /** `fast`: sessions terminated (57P01), then a clean shutdown; `immediate`: a crash, recovered at the next start. */
  stop(mode: 'fast' | 'immediate'): Promise<void>
  /** Starts it again on the same port and data; resolves once it accepts connections. */
  start(): Promise<void>
  /** The server's log, for failure messages. */
  log(): Promise<string>
  destroy(): Promise<void>
}

export async function startPostgresCluster(): Promise<PostgresCluster> {
  const bin = postgresBinaries()
  if (!bin) throw new Error("no PostgreSQL server binaries (install Debian's postgresql, or set PG_BINDIR)")
  const dir = await mkdtemp(path.join(tmpdir(), 'platform-pg-'))
  const data = path.join(dir, 'data')
  const logFile = path.join(dir, 'server.log')
  const asRoot = process.getuid?.() === 0
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const { stdout: group } = await run('id', ['-g', 'postgres'])
    await chown(dir, Number(stdout.trim()), Number(group.trim()))
  }
  const pg = (command: string, args: string[]) =>
    asRoot
      ? run('runuser', ['-u', 'postgres', '--', path.join(bin, command), ...args])
      : run(path.join(bin, command), args)

  await pg('initdb', [
    '-D',
    data,
    '-U',
    'postgres',
    '--auth=trust',
    '-E',
    'UTF8',
    '--no-sync',
    '--no-instructions',
  ])
  const port = await freePort()
  const options = [
    `-p ${port}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${dir}`,
    '-c fsync=off',
    '-c max_connections=50',
  ].join(' ')
  let running = false
  const start = async () => {
    await pg('pg_ctl', ['-D', data, '-l', logFile, '-o', options, '-w', '-t', '60', 'start'])
    running = true
  }
  const stop = async (mode: 'fast' | 'immediate') => {
    await pg('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop'])
    running = false
  }
  await start()
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    stop,
    start,
    log: () => readFile(logFile, 'utf8').catch(() => ''),
    async destroy() {
      if (running) await stop('immediate').catch(() => undefined)
      await rm(dir, { recursive: true, force: true })
    },
  }
}
