import { open, readFile, rename, unlink, writeFile } from 'node:fs/promises'
import type { PGlite } from '@electric-sql/pglite'
import { PGLiteSocketServer } from '@electric-sql/pglite-socket'
import type { FifoLock } from './fifo-lock.ts'

// PGlite is one process's database: two processes that open one directory corrupt it. So exactly
// one process (the holder) opens an embedded database directory, under an exclusive lock file
// beside it, and serves it to the others (the CLI beside `npm run dev`, psql) over a PostgreSQL
// socket on loopback. Every other process connects there and never opens the files itself.

/** What the lock file says: the process holding the directory and where it serves it. */
export interface HolderRecord {
  pid: number
  /** The loopback port of its PostgreSQL socket; null while it is still starting. */
  port: number | null
}

export class EmbeddedDatabaseBusyError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'EmbeddedDatabaseBusyError'
  }
}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

async function readHolder(lockPath: string): Promise<HolderRecord | null> {
  try {
    const record = JSON.parse(await readFile(lockPath, 'utf8')) as HolderRecord
    return typeof record.pid === 'number' ? record : null
  } catch {
    return null
  }
}

const lockPathOf = (directory: string) => `${directory}.lock`

/** Takes the lock of `directory`; resolves to false when a live process holds it. */
export async function tryLock(directory: string): Promise<boolean> {
  const lockPath = lockPathOf(directory)
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const file = await open(lockPath, 'wx', 0o600)
      await file.writeFile(`${JSON.stringify({ pid: process.pid, port: null } satisfies HolderRecord)}\n`)
      await file.close()
      return true
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
    }
    const holder = await readHolder(lockPath)
    // A lock file being written, or left by a process that is gone: the second case is taken over.
    if (holder && isAlive(holder.pid)) return false
    if (!holder) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      const again = await readHolder(lockPath)
      if (again && isAlive(again.pid)) return false
    }
    await unlink(lockPath).catch(() => undefined)
  }
  return false
}

/**
 * Where the live holder of `directory` serves it, waiting up to `withinMs` for a holder that is
 * still starting; throws EmbeddedDatabaseBusyError naming the holder when it does not serve.
 */
export async function holderAddress(
  directory: string,
  withinMs = 15_000,
): Promise<{ port: number; pid: number }> {
  const lockPath = lockPathOf(directory)
  const deadline = Date.now() + withinMs
  for (;;) {
    const holder = await readHolder(lockPath)
    if (holder?.port && isAlive(holder.pid)) return { port: holder.port, pid: holder.pid }
    if (Date.now() >= deadline) {
      throw new EmbeddedDatabaseBusyError(
        `The embedded database in ${directory} is held by process ${holder?.pid ?? '(unknown)'}, which does not serve it. ` +
          `Stop that process and run the command again, or set platform.datasource.url to use PostgreSQL; ` +
          `if no such process runs, delete ${lockPath}.`,
      )
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/**
 * Serves the holder's PGlite on a loopback port and records it in the lock file. The holder's own
 * queries (through `lock`, which its Kysely statements and transactions take) and the socket
 * clients' take turns as whole units: a client keeps the database from its first message until a
 * Sync or simple query that leaves no transaction open, so neither ever runs inside the other's
 * transaction or extended-protocol exchange.
 */
export async function serveHeld(
  directory: string,
  pglite: PGlite,
  lock: FifoLock,
): Promise<{ port: number; close(): Promise<void> }> {
  let release: (() => void) | undefined
  let lastMessage = 0
  const settle = () => {
    const unitDone = lastMessage === 0x53 /* Sync */ || lastMessage === 0x51 /* Query */ || lastMessage === 0
    if (release && unitDone && !pglite.isInTransaction()) {
      release()
      release = undefined
    }
  }
  const shared = new Proxy(pglite, {
    get(target, property, receiver) {
      if (property === 'isInTransaction') return () => release !== undefined
      if (property === 'runExclusive') {
        return async <T>(fn: () => Promise<T>): Promise<T> => {
          release ??= await lock.acquire()
          try {
            return await target.runExclusive(fn)
          } finally {
            settle()
          }
        }
      }
      if (property === 'execProtocolRawStream') {
        return (message: Uint8Array, options: unknown) => {
          // A startup message has no type byte: it starts with its length (a zero byte here).
          const type = message[0] ?? 0
          lastMessage = type === 0x58 /* Terminate */ ? 0 : type
          return (target.execProtocolRawStream as (m: Uint8Array, o: unknown) => Promise<unknown>)(
            message,
            options,
          )
        }
      }
      if (property === 'exec') {
        // Only the socket server calls this, to roll back the transaction of a client that left.
        return async (query: string) => {
          try {
            return await target.exec(query)
          } finally {
            lastMessage = 0
            settle()
          }
        }
      }
      const value = Reflect.get(target, property, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  const server = new PGLiteSocketServer({ db: shared, host: '127.0.0.1', port: 0, maxConnections: 16 })
  await server.start()
  const port = Number(server.getServerConn().split(':').pop())
  const lockPath = lockPathOf(directory)
  await writeFile(
    `${lockPath}.tmp`,
    `${JSON.stringify({ pid: process.pid, port } satisfies HolderRecord)}\n`,
    {
      mode: 0o600,
    },
  )
  await rename(`${lockPath}.tmp`, lockPath)
  return {
    port,
    close: async () => {
      await server.stop()
      release?.()
      release = undefined
    },
  }
}

/** Gives up the lock of `directory` if this process holds it. */
export async function unlock(directory: string): Promise<void> {
  const lockPath = lockPathOf(directory)
  const holder = await readHolder(lockPath)
  if (holder?.pid === process.pid) await unlink(lockPath).catch(() => undefined)
}
