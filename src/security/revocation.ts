import type { FastifyBaseLogger } from 'fastify'
import type { DatabaseHandle } from '../db/database.ts'
import { LISTEN_LOST, LISTEN_RESET, notify } from '../db/notifications.ts'
import type { Tx } from '../db/schema.ts'
import { isUuid } from '../uuid.ts'

// Revocations pushed to every instance. Whatever ends access (an API key revoked, a service
// account disabled, a session revoked, a user's sessions ended) is published with NOTIFY on
// REVOCATION_CHANNEL inside the transaction that makes the change, so every instance hears of it
// when, and only if, it commits; each instance's caches of credentials drop what it names. The
// caches still expire on their own (`platform.auth.revocation.fallback-ttl`), which bounds how
// stale an instance can be while its LISTEN connection is down; they are emptied when it is lost
// and again when it is back. The instance that makes the change does not wait for its own
// notification: `notify` tells its listeners once the transaction commits, before the change is
// answered, so a request right after the answer is refused there too.

export const REVOCATION_CHANNEL = 'platform_revocation'

export type Revocation =
  /** An API key, named by the SHA-256 under which it is stored (what the key cache is keyed by). */
  | { kind: 'api_key'; keyHash: string }
  | { kind: 'service_account'; id: string }
  | { kind: 'session'; id: string }
  /** Everything of a user: all sessions, the session version, the account's state. */
  | { kind: 'user'; id: string }

const value = (revocation: Revocation) => (revocation.kind === 'api_key' ? revocation.keyHash : revocation.id)

/** Announces a revocation from inside the transaction that makes it. */
export function publishRevocation(trx: Tx, revocation: Revocation): Promise<void> {
  return notify(trx, REVOCATION_CHANNEL, `${revocation.kind}:${value(revocation)}`)
}

/** The revocation a payload names, or null for anything malformed (it is ignored). */
export function parseRevocation(payload: string): Revocation | null {
  const colon = payload.indexOf(':')
  const kind = payload.slice(0, colon)
  const rest = payload.slice(colon + 1)
  if (kind === 'api_key') return /^[0-9a-f]{64}$/.test(rest) ? { kind, keyHash: rest } : null
  if (kind === 'service_account' || kind === 'session' || kind === 'user')
    return isUuid(rest) ? { kind, id: rest } : null
  return null
}

/** A holder of credentials' state in this process, told of every revocation. */
export interface RevocationListener {
  /** Drops what the revocation names. */
  revoked(revocation: Revocation): void
  /** Drops everything: notifications may have been missed. */
  clear(): void
}

/**
 * Tells `listeners` of every revocation published on any instance, from now until the returned
 * function is called. When the LISTEN connection is lost, and again when it is back, revocations
 * may have been missed: nothing cached is trusted any more, so every listener drops everything.
 */
export function listenForRevocations(
  listen: DatabaseHandle['listen'],
  listeners: readonly RevocationListener[],
  log: Pick<FastifyBaseLogger, 'info' | 'warn'>,
): Promise<() => Promise<void>> {
  return listen(REVOCATION_CHANNEL, (payload) => {
    if (payload === LISTEN_LOST || payload === LISTEN_RESET) {
      for (const listener of listeners) listener.clear()
      if (payload === LISTEN_LOST) log.warn('revocation notifications lost; credential caches cleared')
      else log.info('revocation notifications resumed; credential caches cleared')
      return
    }
    const revocation = parseRevocation(payload)
    if (revocation) for (const listener of listeners) listener.revoked(revocation)
  })
}
