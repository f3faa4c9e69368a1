import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { freePort } from '../../src/lifecycle.ts'
import { pollUntil } from './poll.ts'
import { spawnDaemon } from './process.ts'

// A real HAProxy (Debian's haproxy package, which CI installs) on a free loopback port, balancing
// round robin over service processes on 127.0.0.1 and taking a server out after `fall` failed
// checks of GET /health/ready (one every `interMs`), back in after `rise` good ones. Its statistics
// page (CSV) tells what the balancer thinks of each server.

export const HAPROXY = process.env.HAPROXY_BIN ?? '/usr/sbin/haproxy'
export const haproxyInstalled = (): boolean => existsSync(HAPROXY)

export interface HaproxyOptions {
  servers: { name: string; port: number }[]
  interMs?: number
  fall?: number
  rise?: number
}

export interface Haproxy {
  /** `http://127.0.0.1:<port>` of the frontend */
  base: string
  /** Each server's status as the balancer sees it: `UP`, `DOWN`, `UP 1/2`, `DOWN 1/2`, … */
  statuses(): Promise<Map<string, string>>
  /** Resolves once the balancer sees `server` as `status` (`UP` or `DOWN`, exactly). */
  sees(server: string, status: 'UP' | 'DOWN', withinMs?: number): Promise<number>
  output(): string
  stop(): Promise<void>
}

export async function startHaproxy(options: HaproxyOptions): Promise<Haproxy> {
  const [port, statsPort] = [await freePort(), await freePort()]
  const dir = await mkdtemp(path.join(tmpdir(), 'platform-haproxy-'))
  const file = path.join(dir, 'haproxy.cfg')
  const { interMs = 250, fall = 2, rise = 2 } = options
  await writeFile(
    file,
    [
      'global',
      '  maxconn 2000',
      'defaults',
      '  mode http',
      '  timeout connect 2s',
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
  const statuses = async () => {
    const res = await fetch(`http://127.0.0.1:${statsPort}/stats;csv`, { signal: AbortSignal.timeout(5_000) })
    const [header = '', ...rows] = (await res.text()).trim().split('\n')
    const columns = header.replace(/^# /, '').split(',')
    const [proxy, server, status] = ['pxname', 'svname', 'status'].map((name) => columns.indexOf(name))
    const seen = new Map<string, string>()
    for (const row of rows) {
      const cells = row.split(',')
      if (
        cells[proxy as number] === 'instances' &&
        !['FRONTEND', 'BACKEND'].includes(cells[server as number] ?? '')
      )
        seen.set(cells[server as number] as string, cells[status as number] as string)
    }
    return seen
  }
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
    output: outputOf,
    stop: async () => {
      if (!hasExited()) child.kill('SIGTERM')
      await done
      await rm(dir, { recursive: true, force: true })
    },
  }
}
