import { type ChildProcess, spawn } from 'node:child_process'
import { envName } from '../../src/config.ts'
import { freePort } from '../../src/lifecycle.ts'
import { type Finished, ROOT, START_NODE_FLAGS } from './process.ts'

// The service as `npm start` runs it (src/server.ts, all configuration from the environment), in a
// process of its own on 127.0.0.1, for tests that measure it from outside or kill it. `preload`
// modules run first (`node --import`), with an IPC channel to this process when `ipc` is set.

export interface ServiceProcess {
  /** `http://127.0.0.1:<port>` */
  base: string
  port: number
  child: ChildProcess
  /** What the process wrote so far (stdout and stderr), for failure messages. */
  output(): string
  /** SIGKILL: no shutdown hook runs, in-flight requests and transactions are cut where they are. */
  kill(): Promise<Finished>
  /** SIGTERM: the graceful shutdown of src/lifecycle.ts. */
  stop(): Promise<Finished>
}

export interface ServiceOptions {
  /** The environment (nothing is inherited but PATH); host and port are set here. */
  env: Record<string, string>
  /** A port to reuse (a restart on the same address); a free one otherwise. */
  port?: number
  preload?: string[]
  ipc?: boolean
  readyWithinMs?: number
  /** The checkout to run (another release's sources); this one by default. */
  root?: string
}

/** Starts the service and resolves once GET /health/live answers 200; rejects if it exits first. */
export async function startService(options: ServiceOptions): Promise<ServiceProcess> {
  const port = options.port ?? (await freePort())
  const args = [
    ...START_NODE_FLAGS,
    ...(options.preload ?? []).flatMap((p) => ['--import', p]),
    'src/server.ts',
  ]
  const child = spawn(process.execPath, args, {
    cwd: options.root ?? ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      ...options.env,
      PLATFORM_SERVER_HOST: '127.0.0.1',
      PLATFORM_SERVER_PORT: String(port),
    },
    stdio: options.ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout?.on('data', (chunk) => {
    output += chunk
  })
  child.stderr?.on('data', (chunk) => {
    output += chunk
  })
  const done = new Promise<Finished>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout: output, stderr: '' }))
  })
  let exited = false
  void done.then(() => {
    exited = true
  })
  const base = `http://127.0.0.1:${port}`
  const deadline = Date.now() + (options.readyWithinMs ?? 30_000)
  for (;;) {
    if (exited) throw new Error(`the service exited before it was ready:\n${output}`)
    const live = await fetch(`${base}/health/live`).then(
      (res) => res.status === 200,
      () => false,
    )
    if (live) break
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`the service was not live within the deadline:\n${output}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  const end = (signal: NodeJS.Signals) => {
    if (!exited) child.kill(signal)
    return done
  }
  return {
    base,
    port,
    child,
    output: () => output,
    kill: () => end('SIGKILL'),
    stop: () => end('SIGTERM'),
  }
}

/** The environment variable of a dotted property, for a ConfigSource given to a process. */
export function envOf(source: Record<string, string | undefined>): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [property, value] of Object.entries(source)) {
    if (value !== undefined) env[envName(property)] = value
  }
  return env
}
