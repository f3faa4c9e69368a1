import type { Kysely } from 'kysely'
import type { Database, Tx } from './schema.ts'

// Work that waits for a unit of work to commit. `inTransaction` (database.ts) runs the hooks of the
// transaction it committed, with the database it ran on, and forgets them when it rolls back.

/** What runs once a transaction has committed, given the database it committed on. */
export type CommitHook = (db: Kysely<Database>) => void

const hooks = new WeakMap<Tx, CommitHook[]>()

/**
 * Runs `hook` once the unit of work `trx` belongs to has committed (not at all if it rolls back, or
 * if `trx` is not one that inTransaction runs). For telling this process of what the transaction
 * wrote (its own notifications, src/db/notifications.ts) and nudging work that reads it (the audit
 * chainer). The hook must not throw and must not need to run: what it starts is found again by a
 * sweep, and what it tells arrives again over LISTEN.
 */
export function afterCommit(trx: Tx, hook: CommitHook): void {
  const pending = hooks.get(trx)
  if (pending) pending.push(hook)
  else hooks.set(trx, [hook])
}

/** Runs, once, the hooks of `trx`, which has committed on `db`. */
export function committed(trx: Tx, db: Kysely<Database>): void {
  const pending = hooks.get(trx)
  if (!pending) return
  hooks.delete(trx)
  for (const hook of pending) hook(db)
}

/** Drops the hooks of `trx`, which did not commit. */
export function abandoned(trx: Tx): void {
  hooks.delete(trx)
}
