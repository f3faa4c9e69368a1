import { createSocket } from 'node:dgram'
import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { freePort } from '../../src/lifecycle.ts'
import { pollUntil } from './poll.ts'
import { spawnDaemon } from './process.ts'

// A real HAProxy (Debian's haproxy package, which CI installs) on a free loopback port, balancing
// round robin over service processes on 127.0.0.1 and taking a server out after `fall` failed
// checks of GET /health/ready (one every `interMs`), back in after `rise` good ones. Its statistics
// page (CSV) tells what the balancer thinks of each server; its runtime API (an admin socket) takes a
// server out by hand (`set server instances/a state maint`) and puts it back. With `logPort` it
// sends one line per request, `<server> <Tr> <status>` (Tr: the server's response time in ms), as
// syslog over UDP to 127.0.0.1:logPort (requestLog below reads them).

export const HAPROXY = process.env.HAPROXY_BIN ?? '/usr/sbin/haproxy'
export const haproxyInstalled = (): boolean => existsSync(HAPROXY)

export interface HaproxyOptions {
  servers: { name: string; port: number }[]
  interMs?: number
  fall?: number
  rise?: number
  /** A UDP port on 127.0.0.1 that receives one log line per request. */
  logPort?: number
}

export interface Haproxy {
  /** `http://127.0.0.1:<port>` of the frontend */
  base: string
  /** Each server's status as the balancer sees it: `UP`, `DOWN`, `UP 1/2`, `DOWN 1/2`, … */
  statuses(): Promise<Map<string, string>>
  /** Resolves once the balancer sees `server` as `status` (`UP`, `DOWN` or `MAINT`, exactly). */
  sees(server: string, status: 'UP' | 'DOWN' | 'MAINT', withinMs?: number): Promise<number>
  /** Each server's row of the statistics CSV, by column name (`scur`, `stot`, `hrsp_2xx`, …). */
  stats(): Promise<Map<string, Record<string, string>>>
  /** A command of the runtime API (`set server instances/a state maint`); resolves with its answer. */
  command(line: string): Promise<string>
  output(): string
  stop(): Promise<void>
}

export async function startHaproxy(options: HaproxyOptions): Promise<Haproxy> {
  const [port, statsPort] = [await freePort(), await freePort()]
  const dir = await mkdtemp(path.join(tmpdir(), 'platform-haproxy-'))
  const file = path.join(dir, 'haproxy.cfg')
  const socket = path.join(dir, 'admin.sock')
  const { interMs = 250, fall = 2, rise = 2 } = options
  await writeFile(
    file,
    [
      'global',
      '  maxconn 2000',
      `  stats socket ${socket} level admin`,
      ...(options.logPort ? [`  log 127.0.0.1:${options.logPort} format raw local0 info`] : []),
      'defaults',
      '  mode http',
      ...(options.logPort ? ['  log global', '  log-format "%s %Tr %ST"'] : []),
      '  timeout connect 2s',
      // A check's own limit (without it, `inter`): an instance slowed by a busy machine is not taken
      // out for answering a check late, only for failing it.
      '  timeout check 2s',
      '  timeout client 30s',
      '  timeout server 30s',
      '  timeout http-keep-alive 10s',
      'frontend platform',
      `  bind 127.0.0.1:${port}`,
      '  default_backend instances',
      'backend instances',
      '  balance roundrobin',
      '  option httpchk GET /health/ready',
      '  http-check expect status 200',
      `  default-server inter ${interMs}ms fall ${fall} rise ${rise}`,
      ...options.servers.map((server) => `  server ${server.name} 127.0.0.1:${server.port} check`),
      'listen stats',
      `  bind 127.0.0.1:${statsPort}`,
      '  stats enable',
      '  stats uri /stats',
      '',
    ].join('\n'),
  )
  const { child, output: outputOf, exited: hasExited, done } = spawnDaemon(HAPROXY, ['-f', file, '-db'])
  const stats = async () => {
    const res = await fetch(`http://127.0.0.1:${statsPort}/stats;csv`, { signal: AbortSignal.timeout(5_000) })
    const [header = '', ...rows] = (await res.text()).trim().split('\n')
    const columns = header.replace(/^# /, '').split(',')
    const seen = new Map<string, Record<string, string>>()
    for (const row of rows) {
      const cells = row.split(',')
      const record = Object.fromEntries(columns.map((column, i) => [column, cells[i] ?? '']))
      if (record.pxname === 'instances' && !['FRONTEND', 'BACKEND'].includes(record.svname ?? ''))
        seen.set(record.svname as string, record)
    }
    return seen
  }
  const statuses = async () =>
    new Map([...(await stats())].map(([server, record]) => [server, record.status as string]))
  try {
    await pollUntil(
      'HAProxy answering its statistics',
      () =>
        statuses().then(
          () => !hasExited(),
          () => false,
        ),
      10_000,
      25,
    )
  } catch (error) {
    child.kill('SIGKILL')
    await rm(dir, { recursive: true, force: true })
    throw new Error(`${(error as Error).message}:\n${outputOf()}`)
  }
  return {
    base: `http://127.0.0.1:${port}`,
    statuses,
    sees: (server, status, withinMs = 30_000) =>
      pollUntil(
        `HAProxy seeing ${server} ${status}`,
        async () => (await statuses()).get(server) === status,
        withinMs,
        25,
      ),
    stats,
    command: (line) =>
      new Promise<string>((resolve, reject) => {
        let answer = ''
        const client = connect(socket)
        client.on('data', (chunk) => {
          answer += chunk
        })
        client.on('end', () => resolve(answer.trim()))
        client.on('error', reject)
        client.end(`${line}\n`)
      }),
    output: outputOf,
    stop: async () => {
      if (!hasExited()) child.kill('SIGTERM')
      await done
      await rm(dir, { recursive: true, force: true })
    },
  }
}

/** One request as the balancer logged it: the server that answered, its response time and status. */
export interface LoggedRequest {
  server: string
  /** ms the server took to answer the headers; -1 when it did not answer */
  responseMs: number
  status: number
}

/** A UDP socket on 127.0.0.1 receiving HAProxy's request log (startHaproxy's `logPort`). */
export async function requestLog(
  onRequest: (request: LoggedRequest) => void,
): Promise<{ port: number; close(): Promise<void> }> {
  const socket = createSocket('udp4')
  socket.on('message', (message) => {
    for (const line of message.toString('utf8').split('\n')) {
      const match = /(\S+) (-?\d+) (\d+)\s*$/.exec(line)
      if (match)
        onRequest({ server: match[1] as string, responseMs: Number(match[2]), status: Number(match[3]) })
    }
  })
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve))
  return {
    port: socket.address().port,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  }
}
