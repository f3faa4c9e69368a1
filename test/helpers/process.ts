import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'

export const ROOT = path.resolve(import.meta.dirname, '../..')

/** The node flags `npm start` runs the service with (package.json), so tests and the bench run it alike. */
export const START_NODE_FLAGS: string[] =
  /"start": "node ([^"]*?)src\/server\.ts"/
    .exec(readFileSync(path.join(ROOT, 'package.json'), 'utf8'))?.[1]
    ?.trim()
    .split(/\s+/)
    .filter(Boolean) ?? []

export interface Finished {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

/**
 * Runs `node <nodeFlags> <script>` from the project root with the given environment (nothing
 * inherited but PATH). Node flags go on the command line: NODE_OPTIONS refuses most V8 flags.
 */
export function runNode(
  script: string,
  args: string[],
  env: Record<string, string>,
  stdin?: string,
  nodeFlags: string[] = [],
): { child: ChildProcess; done: Promise<Finished> } {
  const child = spawn(process.execPath, [...nodeFlags, script, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  })
  if (stdin !== undefined) child.stdin?.end(stdin)
  let stdout = ''
  let stderr = ''
  child.stdout?.on('data', (chunk) => {
    stdout += chunk
  })
  child.stderr?.on('data', (chunk) => {
    stderr += chunk
  })
  const done = new Promise<Finished>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
  return { child, done }
}

/** Resolves when the child's output matches, or rejects when it exits first. */
export function waitForOutput(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = ''
    const onData = (chunk: Buffer) => {
      seen += chunk.toString()
      const match = pattern.exec(seen)
      if (match) {
        cleanup()
        resolve(match[0])
      }
    }
    const onExit = () => {
      cleanup()
      reject(new Error(`process exited before printing ${pattern}: ${seen}`))
    }
    const cleanup = () => {
      child.stdout?.off('data', onData)
      child.stderr?.off('data', onData)
      child.off('exit', onExit)
    }
    child.stdout?.on('data', onData)
    child.stderr?.on('data', onData)
    child.on('exit', onExit)
  })
}

/** A daemon run in the foreground (PgBouncer, HAProxy): its output kept for failure messages. */
export interface Daemon {
  child: ChildProcess
  output(): string
  exited(): boolean
  /** Resolves once it has exited. */
  done: Promise<void>
}

export function spawnDaemon(command: string, args: string[]): Daemon {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const keep = (chunk: Buffer) => {
    output += chunk
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  let exited = false
  const done = new Promise<void>((resolve) => {
    child.on('close', () => {
      exited = true
      resolve()
    })
  })
  return { child, output: () => output, exited: () => exited, done }
}
