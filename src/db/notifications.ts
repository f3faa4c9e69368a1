import { randomUUID } from 'node:crypto'
import { type Kysely, sql } from 'kysely'
import pg from 'pg'
import { afterCommit } from './after-commit.ts'
import type { Database, Tx } from './schema.ts'

// Change notifications between instances on one database: NOTIFY inside the writing
// transaction, LISTEN on a connection of its own. `DatabaseHandle.listen` (database.ts) is the
// subscribing side, for PostgreSQL here and for PGlite on its embedded session.

// Signals a listener receives in place of a payload. A NOTIFY payload is text, which cannot
// contain NUL, so no real payload can be mistaken for them.
/** The LISTEN connection is lost: notifications sent from now on may be missed. */
export const LISTEN_LOST = '\u0000lost'
/** The LISTEN connection is back: anything sent meanwhile was missed. */
export const LISTEN_RESET = '\u0000reset'

/**
 * Sends a notification from inside a transaction: listeners receive it when, and only if, the
 * transaction commits, so nobody hears of a change before it can be read. This process's own
 * listeners on the same database (subscribed through `echoing`) are told as soon as the commit
 * returns, before the change is answered, so an instance reads its own writes without waiting for
 * its LISTEN connection; they hear the same payload again when that connection delivers it, so a
 * listener must take a notification twice as it takes it once (drop a cache entry, not count).
 */
export async function notify(trx: Tx, channel: string, payload: string): Promise<void> {
  afterCommit(trx, (db) => {
    const subscribers = inProcess.get(db)?.get(channel)
    if (subscribers) for (const subscriber of subscribers) subscriber(payload)
  })
  await sql`select pg_notify(${channel}, ${payload})`.execute(trx)
}

/** This process's subscribers by database and channel, told of `notify` at commit. */
const inProcess = new WeakMap<Kysely<Database>, Map<string, Set<Subscriber>>>()

/**
 * `listen` on `db`, whose subscribers also hear what this process notifies on `db` as soon as its
 * transaction commits (see `notify`), besides everything the LISTEN connection delivers.
 */
export function echoing(db: Kysely<Database>, listen: Listen): Listen {
  return async (channel, onMessage) => {
    const stop = await listen(channel, onMessage)
    const channels = inProcess.get(db) ?? new Map<string, Set<Subscriber>>()
    inProcess.set(db, channels)
    const subscribers = channels.get(channel) ?? new Set<Subscriber>()
    channels.set(channel, subscribers)
    subscribers.add(onMessage)
    return async () => {
      subscribers.delete(onMessage)
      if (subscribers.size === 0 && channels.get(channel) === subscribers) channels.delete(channel)
      await stop()
    }
  }
}

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`
const RECONNECT_MIN_MS = 100
const RECONNECT_MAX_MS = 5_000

type Subscriber = (payload: string) => void

/** The process's notifications from PostgreSQL: `listen` subscribes to a channel, `close` ends all. */
export interface PostgresNotifications {
  listen(channel: string, onMessage: Subscriber): Promise<() => Promise<void>>
  close(): Promise<void>
}

/**
 * One LISTEN connection for every channel of the process, outside the pool: a pooled connection
 * would be handed to queries and recycled. It opens with the first subscription and closes with
 * the last. When it fails, every subscriber of every channel receives LISTEN_LOST, and it
 * reconnects with back-off, forever, listening again to every channel before each subscriber
 * receives LISTEN_RESET. Subscribing, unsubscribing and reconnecting run one at a time.
 */
export function postgresNotifications(url: string, onError: (error: Error) => void): PostgresNotifications {
  const channels = new Map<string, Set<Subscriber>>()
  let current: pg.Client | null = null
  let up = false
  let stopped = false
  let retry: NodeJS.Timeout | undefined
  let delay = RECONNECT_MIN_MS
  let queue: Promise<unknown> = Promise.resolve()
  const serially = <T>(work: () => Promise<T>): Promise<T> => {
    const result = queue.then(work)
    queue = result.catch(() => {})
    return result
  }
  const broadcast = (signal: string) => {
    for (const subscribers of channels.values()) for (const subscriber of subscribers) subscriber(signal)
  }

  const drop = (client: pg.Client, error: Error) => {
    if (current !== client) return
    current = null
    client.removeAllListeners('notification')
    client.end().catch(() => {})
    // While (re)connecting the opener handles the failure; afterwards it is reported here.
    if (!up) return
    up = false
    broadcast(LISTEN_LOST)
    if (stopped) return
    onError(error)
    reconnectLater()
  }

  const open = async () => {
    const client = new pg.Client({
      connectionString: url,
      application_name: 'platform-core-listen',
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      connectionTimeoutMillis: 5_000,
    })
    current = client
    client.on('notification', (message) => {
      const subscribers = channels.get(message.channel)
      if (subscribers) for (const subscriber of subscribers) subscriber(message.payload ?? '')
    })
    client.on('error', (error) => drop(client, error))
    client.on('end', () => drop(client, new Error('The LISTEN connection ended')))
    try {
      await client.connect()
      await client.query([...channels.keys()].map((channel) => `listen ${quoteIdent(channel)}`).join(';'))
    } catch (error) {
      drop(client, error as Error)
      throw error
    }
    if (current !== client) throw new Error('The LISTEN connection ended')
    up = true
  }

  const reconnectLater = () => {
    if (retry || stopped) return
    retry = setTimeout(
      () =>
        void serially(async () => {
          retry = undefined
          if (stopped || channels.size === 0 || current) return
          try {
            await open()
            delay = RECONNECT_MIN_MS
            broadcast(LISTEN_RESET)
          } catch (error) {
            if (stopped) return
            onError(error as Error)
            reconnectLater()
          }
        }),
      delay,
    )
    retry.unref()
    delay = Math.min(delay * 2, RECONNECT_MAX_MS)
  }

  const unsubscribe = (channel: string, onMessage: Subscriber) =>
    serially(async () => {
      const subscribers = channels.get(channel)
      if (!subscribers?.delete(onMessage) || subscribers.size > 0) return
      channels.delete(channel)
      const client = current
      if (channels.size > 0) {
        if (up && client) await client.query(`unlisten ${quoteIdent(channel)}`).catch(() => {})
        return
      }
      // The last subscriber is gone: so is the connection, until somebody subscribes again.
      clearTimeout(retry)
      retry = undefined
      up = false
      current = null
      await client?.end().catch(() => {})
    })

  return {
    listen: (channel, onMessage) =>
      serially(async () => {
        if (stopped) throw new Error('The notifications are closed')
        let subscribers = channels.get(channel)
        const fresh = subscribers === undefined
        if (!subscribers) {
          subscribers = new Set()
          channels.set(channel, subscribers)
        }
        subscribers.add(onMessage)
        if (up && current) {
          // A failure here is the connection's: its error handler reports it and reconnects.
          if (fresh) await current.query(`listen ${quoteIdent(channel)}`).catch(() => {})
        } else if (!current && !retry) {
          try {
            await open()
          } catch (error) {
            // A database that is down at start-up must not stop the service: listen as soon as it
            // is back, and until then report the channel as lost, so caches are bypassed.
            broadcast(LISTEN_LOST)
            onError(error as Error)
            reconnectLater()
          }
        } else {
          // Reconnecting: this subscriber misses notifications until LISTEN_RESET.
          onMessage(LISTEN_LOST)
        }
        return () => unsubscribe(channel, onMessage)
      }),
    close: () =>
      serially(async () => {
        stopped = true
        clearTimeout(retry)
        retry = undefined
        up = false
        channels.clear()
        const client = current
        current = null
        await client?.end().catch(() => {})
      }),
  }
}

/** How long a start-up waits for its probe notification on the LISTEN connection. */
export const LISTEN_PROBE_MS = 5_000
const PROBE_CHANNEL = 'platform_listen_probe'

/**
 * Whether notifications reach a LISTEN connection on `url`: a connection opened there listens on a
 * probe channel, `send` notifies it from elsewhere (the pool), and the answer is whether that
 * notification arrives within `timeoutMs`. Straight to PostgreSQL it arrives within milliseconds.
 * Through a transaction pooler (PgBouncer with `pool_mode = transaction`) it never does: the LISTEN
 * ran on a server connection that went back to the pooler's pool when the statement ended, and a
 * notification for an idle server connection is not passed to any client. (Comparing
 * `pg_backend_pid()` across statements would not tell: an idle pooler hands the same server
 * connection back, so two answers agree by chance.) A statement now and then on the probe
 * connection makes the server deliver what is pending at once, without waiting for its idle loop.
 */
export async function listenReaches(
  url: string,
  send: (channel: string, payload: string) => Promise<void>,
  timeoutMs = LISTEN_PROBE_MS,
): Promise<boolean> {
  const client = new pg.Client({
    connectionString: url,
    application_name: 'platform-core-listen-probe',
    connectionTimeoutMillis: 5_000,
  })
  client.on('error', () => {})
  const payload = randomUUID()
  let arrived = false
  client.on('notification', (message) => {
    if (message.channel === PROBE_CHANNEL && message.payload === payload) arrived = true
  })
  await client.connect()
  try {
    await client.query(`listen ${PROBE_CHANNEL}`)
    await send(PROBE_CHANNEL, payload)
    const deadline = Date.now() + timeoutMs
    while (!arrived && Date.now() < deadline) {
      await client.query('select 1')
      if (!arrived) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    return arrived
  } finally {
    await client.end().catch(() => {})
  }
}

type Listen = (channel: string, onMessage: (payload: string) => void) => Promise<() => Promise<void>>

/**
 * Shares one subscription per channel among every subscriber of the process (each LISTEN on
 * PostgreSQL is a connection of its own): the first subscriber opens it, the last one closes it.
 */
export function sharedListen(listen: Listen): Listen {
  const channels = new Map<
    string,
    { subscribers: Set<(payload: string) => void>; opened: Promise<() => Promise<void>> }
  >()
  return async (channel, onMessage) => {
    let entry = channels.get(channel)
    if (!entry) {
      const subscribers = new Set<(payload: string) => void>()
      const opened = listen(channel, (payload) => {
        for (const subscriber of subscribers) subscriber(payload)
      })
      entry = { subscribers, opened }
      channels.set(channel, entry)
      opened.catch(() => channels.delete(channel))
    }
    const { subscribers, opened } = entry
    subscribers.add(onMessage)
    const stop = await opened
    return async () => {
      if (!subscribers.delete(onMessage) || subscribers.size > 0) return
      if (channels.get(channel)?.subscribers === subscribers) channels.delete(channel)
      await stop()
    }
  }
}
