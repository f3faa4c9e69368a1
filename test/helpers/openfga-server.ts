import { type ChildProcess, spawn } from 'node:child_process'
import { access, constants } from 'node:fs/promises'
import path from 'node:path'
import { openFgaInstallDir, pinnedOpenFgaVersion } from '../../scripts/openfga-install.ts'
import { freePort } from '../../src/lifecycle.ts'

// A real OpenFGA server for a test file: the binary `npm run openfga:install` builds (the version
// compose.yaml pins), started on free loopback ports with the in-memory datastore or PostgreSQL,
// ready when its health endpoint says SERVING, stopped with the file. Without the binary, tests
// that need it skip, except in CI (CI=true), where .ci/run installs it and its absence fails them.

export interface OpenFgaServer {
  url: string
  /** The preshared key the server requires, when started with one. */
  apiToken: string | undefined
  /** Stops the server (SIGTERM, then SIGKILL after 5 s). */
  stop(): Promise<void>
}

export interface OpenFgaOptions {
  /** `memory` (default), or a PostgreSQL URI the server migrates and uses. */
  datastore?: 'memory' | { postgres: string }
  /** Require this preshared key as a bearer token. */
  presharedKey?: string
  /** A fixed HTTP port (a restart on the same address); a free one otherwise. */
  httpPort?: number
  /** Further `openfga run` flags, such as `--check-query-cache-enabled`. */
  flags?: string[]
}

/** The installed binary's path, or null when it is not installed ($OPENFGA_BIN overrides). */
export async function openFgaBinary(): Promise<string | null> {
  const binary =
    process.env.OPENFGA_BIN ?? path.join(openFgaInstallDir(await pinnedOpenFgaVersion()), 'openfga')
  return access(binary, constants.X_OK).then(
    () => binary,
    () => null,
  )
}

/** Whether the tests that need a real OpenFGA server run: the binary is there, or CI requires it. */
export const openFgaAvailable: boolean = (await openFgaBinary()) !== null || process.env.CI === 'true'

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode)
    else child.once('exit', (code) => resolve(code))
  })
}

async function runToEnd(binary: string, args: string[]): Promise<void> {
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr?.on('data', (chunk) => {
    stderr += chunk
  })
  const code = await exited(child)
  if (code !== 0) throw new Error(`openfga ${args[0]} exited ${code}: ${stderr}`)
}

/** Thrown when a port probed free was taken (by another test file's process) before the bind. */
class PortTaken extends Error {}

/**
 * Starts a server; rejects when it exits or is not healthy within 30 s. A port probed free can be
 * taken by a parallel test file before the server binds it: the start is then tried again on
 * fresh ports, up to five times.
 */
export async function startOpenFga(options: OpenFgaOptions = {}): Promise<OpenFgaServer> {
  const binary = await openFgaBinary()
  if (!binary) throw new Error('OpenFGA is not installed: run npm run openfga:install')
  const datastore = options.datastore ?? 'memory'
  const store =
    datastore === 'memory'
      ? ['--datastore-engine', 'memory']
      : ['--datastore-engine', 'postgres', '--datastore-uri', datastore.postgres]
  if (datastore !== 'memory') await runToEnd(binary, ['migrate', ...store])
  for (let attempt = 1; ; attempt++) {
    const http = options.httpPort ?? (await freePort())
    let grpc = await freePort()
    while (grpc === http) grpc = await freePort()
    try {
      return await launch(binary, store, http, grpc, options)
    } catch (error) {
      if (!(error instanceof PortTaken) || attempt === 5) throw error
    }
  }
}

async function launch(
  binary: string,
  store: string[],
  http: number,
  grpc: number,
  options: OpenFgaOptions,
): Promise<OpenFgaServer> {
  const authn = options.presharedKey
    ? ['--authn-method', 'preshared', '--authn-preshared-keys', options.presharedKey]
    : []
  const child = spawn(
    binary,
    [
      'run',
      ...store,
      ...authn,
      '--http-addr',
      `127.0.0.1:${http}`,
      '--grpc-addr',
      `127.0.0.1:${grpc}`,
      '--playground-enabled=false',
      '--metrics-enabled=false',
      '--log-level',
      'warn',
      ...(options.flags ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  )
  let stderr = ''
  child.stderr?.on('data', (chunk) => {
    stderr += chunk
  })
  const url = `http://127.0.0.1:${http}`
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    const done = exited(child)
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
    await done
    clearTimeout(timer)
  }
  const gone = exited(child).then((code) => {
    const message = `openfga run exited ${code} before it was healthy: ${stderr}`
    throw stderr.includes('address already in use') ? new PortTaken(message) : new Error(message)
  })
  const deadline = Date.now() + 30_000
  const healthy = (async () => {
    while (Date.now() < deadline) {
      const status = await fetch(`${url}/healthz`)
        .then((res) => res.json() as Promise<{ status?: string }>)
        .then((body) => body.status)
        .catch(() => undefined)
      if (status === 'SERVING') return
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    throw new Error(`openfga did not become healthy within 30 s: ${stderr}`)
  })()
  try {
    await Promise.race([healthy, gone])
  } catch (error) {
    await stop()
    throw error
  }
  gone.catch(() => {})
  return { url, apiToken: options.presharedKey, stop }
}
