import type { FastifyBaseLogger } from 'fastify'
import type { Kysely, Selectable } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Database, MailOutboxTable, Tx } from '../db/schema.ts'
import { SecretBox } from '../services/secret-box.ts'
import {
  type MailTemplateData,
  type MailTemplateName,
  MailTemplates,
  UnknownTemplateError,
} from './templates.ts'
import type { MailTransport } from './transports.ts'

// Email never rolls back or blocks a committed change (decisions 6): the change writes an outbox
// row in its own transaction, and this worker delivers it afterwards. A worker claims due rows
// with a lease in one short statement (FOR UPDATE SKIP LOCKED, so instances on one database never
// claim the same row), sends outside any transaction (PGlite is one connection, and a pooled
// connection must not wait on SMTP), then records the outcome. The Message-ID is the same on every
// attempt, so a receiver can drop the copy that a crash between "sent" and "recorded" would cause.

export const MAIL_MAX_ATTEMPTS = 10
const BASE_RETRY_MS = 5_000
const MAX_RETRY_MS = 60 * 60 * 1000
const DEFAULT_BATCH_SIZE = 10
/** Longer than any batch of sends can take with the SMTP timeouts, so a live worker keeps its rows. */
const DEFAULT_LEASE_MS = 5 * 60 * 1000
/** A row is only sent while this much of its lease remains; otherwise it is released. */
const LEASE_MARGIN_MS = 60 * 1000
const DEFAULT_POLL_MS = 1_000
const LAST_ERROR_MAX = 500

export interface MailMessage<K extends MailTemplateName> {
  template: K
  to: string
  /** The template's data, or data sealed with `sealMailData` when it carries a secret (a token link). */
  data: MailTemplateData[K] | SealedMailData
  organizationId?: string | null
}

/** Template data kept encrypted at rest: what it holds is readable only with the outbox's key. */
export interface SealedMailData {
  sealed: string
}

/** The key of sealed outbox data, derived from the JWT secret: every instance of a deployment has it. */
export function mailOutboxBox(jwtSecrets: readonly Buffer[]): SecretBox {
  return new SecretBox(jwtSecrets, 'mail-outbox-data')
}

/** Seals template data that carries a one-time token, so the outbox never holds it readable. */
export function sealMailData(box: SecretBox, data: Record<string, unknown>): SealedMailData {
  return { sealed: box.seal(JSON.stringify(data)) }
}

function unsealMailData(box: SecretBox | undefined, data: Record<string, unknown>): Record<string, unknown> {
  if (typeof data.sealed !== 'string') return data
  if (!box) throw new PermanentMailError('sealed mail data but no key to open it')
  const { sealed, ...rest } = data
  try {
    return { ...rest, ...(JSON.parse(box.open(sealed)) as Record<string, unknown>) }
  } catch {
    throw new PermanentMailError('sealed mail data cannot be opened with the current keys')
  }
}

/** A message that can never be delivered as stored: it is marked failed at once, not retried. */
export class PermanentMailError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'PermanentMailError'
  }
}

// One plain address; a list (`a@x, b@y`) or a display name would let data choose extra recipients.
const SINGLE_ADDRESS = /^[^\s@,;:<>()[\]"\\]+@[^\s@,;:<>()[\]"\\]+$/

/** Writes the message to the outbox in the caller's transaction; it is sent only if that commits. */
export async function enqueueMail<K extends MailTemplateName>(
  trx: Tx,
  message: MailMessage<K>,
  now: Date,
): Promise<{ id: string; messageId: string }> {
  if (!SINGLE_ADDRESS.test(message.to)) throw new Error('mail recipient must be one plain email address')
  const row = await trx
    .insertInto('mail_outbox')
    .values({
      template: message.template,
      recipient: message.to,
      data: JSON.stringify(message.data),
      organization_id: message.organizationId ?? null,
      created_at: now,
      next_attempt_at: now,
    })
    .returning(['id', 'message_id'])
    .executeTakeFirstOrThrow()
  return { id: row.id, messageId: row.message_id }
}

/** The wait after the n-th failed attempt: 5 s, 10 s, 20 s, … (5 s × 2^(n−1)), at most one hour. */
export function retryDelayMs(failedAttempts: number): number {
  return Math.min(BASE_RETRY_MS * 2 ** Math.max(failedAttempts - 1, 0), MAX_RETRY_MS)
}

/** The right-hand side of Message-IDs: the sender's domain. */
export function messageIdDomain(from: string): string {
  return /@([A-Za-z0-9.-]+)>?\s*$/.exec(from)?.[1] ?? 'localhost'
}

const ADDRESS = /[^\s<>()[\]"',;:@]+@[^\s<>()[\]"',;:@]+/g
const URL_TEXT = /\b[a-z][a-z0-9+.-]*:\/\/[^\s<>"']+/gi

/**
 * What is logged and stored about a failure: the error's kind and a message with addresses and
 * links removed. SMTP replies echo recipients, and links carry one-time tokens.
 */
export function describeMailError(error: unknown): Record<string, unknown> {
  const e = (error ?? {}) as { name?: unknown; code?: unknown; responseCode?: unknown; command?: unknown }
  const message = (error instanceof Error ? error.message : String(error))
    .replace(URL_TEXT, '[link]')
    .replace(ADDRESS, '[address]')
    .slice(0, LAST_ERROR_MAX)
  return {
    name: typeof e.name === 'string' ? e.name : 'Error',
    ...(typeof e.code === 'string' ? { code: e.code } : {}),
    ...(typeof e.responseCode === 'number' ? { responseCode: e.responseCode } : {}),
    ...(typeof e.command === 'string' ? { command: e.command.replace(ADDRESS, '[address]') } : {}),
    message,
  }
}

function errorText(description: Record<string, unknown>): string {
  const code = [description.code, description.responseCode].filter((v) => v !== undefined).join(' ')
  return `${code ? `${code}: ` : ''}${String(description.message)}`.slice(0, LAST_ERROR_MAX)
}

type OutboxRow = Selectable<MailOutboxTable>

export interface MailOutboxWorkerOptions {
  db: Kysely<Database>
  transport: MailTransport
  clock: Clock
  /** The From header (platform.mail.from). */
  from: string
  log: Pick<FastifyBaseLogger, 'info' | 'warn' | 'error'>
  templates?: MailTemplates
  /** Opens sealed message data (`sealMailData`). */
  box?: SecretBox
  /** Rows claimed per statement (default 10). */
  batchSize?: number
  leaseMs?: number
  pollIntervalMs?: number
  maxAttempts?: number
}

/** Delivers the mail outbox. Several workers (instances) on one database send each message once. */
export class MailOutboxWorker {
  readonly #db: Kysely<Database>
  readonly #transport: MailTransport
  readonly #clock: Clock
  readonly #from: string
  readonly #domain: string
  readonly #log: MailOutboxWorkerOptions['log']
  readonly #templates: MailTemplates
  readonly #box: SecretBox | undefined
  readonly #batchSize: number
  readonly #leaseMs: number
  readonly #pollIntervalMs: number
  readonly #maxAttempts: number
  readonly #inFlight = new Set<Promise<number>>()
  /** Rows sent whose "sent" could not be recorded (database down): recorded first on the next run. */
  readonly #unrecorded = new Map<string, Date>()
  #timer: NodeJS.Timeout | undefined
  #stopping = false
  #pollFailing = false

  constructor(options: MailOutboxWorkerOptions) {
    this.#db = options.db
    this.#transport = options.transport
    this.#clock = options.clock
    this.#from = options.from
    this.#domain = messageIdDomain(options.from)
    this.#log = options.log
    this.#templates = options.templates ?? new MailTemplates()
    this.#box = options.box
    this.#batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE
    this.#leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS
    this.#pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_MS
    this.#maxAttempts = options.maxAttempts ?? MAIL_MAX_ATTEMPTS
  }

  get templates(): MailTemplates {
    return this.#templates
  }

  /** Claims and attempts every due message; resolves to the number of messages attempted. */
  async runOnce(): Promise<number> {
    const run = this.#drain()
    this.#inFlight.add(run)
    try {
      return await run
    } finally {
      this.#inFlight.delete(run)
    }
  }

  /** Polls every second; the timer does not keep the process alive. */
  start(): void {
    if (this.#timer) return
    this.#stopping = false
    this.#timer = setInterval(() => this.#poll(), this.#pollIntervalMs)
    this.#timer.unref()
  }

  /** Stops polling, lets an in-flight run finish its current message, and waits for it. */
  async stop(): Promise<void> {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#stopping = true
    await Promise.allSettled([...this.#inFlight])
    await this.#recordUnrecorded().catch(() => undefined)
  }

  #poll(): void {
    if (this.#inFlight.size > 0) return
    this.runOnce().then(
      () => {
        if (this.#pollFailing) this.#log.info('mail outbox delivery resumed')
        this.#pollFailing = false
      },
      (error: unknown) => {
        // Once per outage, not once a second.
        if (!this.#pollFailing) this.#log.error({ err: error }, 'mail outbox run failed')
        this.#pollFailing = true
      },
    )
  }

  async #drain(): Promise<number> {
    await this.#recordUnrecorded()
    let attempted = 0
    while (!this.#stopping) {
      const rows = await this.#claim()
      // The messages of a batch are independent (each has its own lease, Message-ID and outcome), so
      // they are sent at once: one slow SMTP round trip no longer holds up the nine others, and
      // delivery keeps pace with traffic (the soak found a one-at-a-time worker falling behind).
      let released = false
      await Promise.all(
        rows.map(async (row) => {
          const leaseLeft = (row.lease_until?.getTime() ?? 0) - this.#clock.now().getTime()
          if (this.#stopping || leaseLeft < LEASE_MARGIN_MS) {
            released = true
            await this.#release([row])
            return
          }
          await this.#deliver(row)
          attempted += 1
        }),
      )
      if (released || rows.length < this.#batchSize) break
    }
    return attempted
  }

  /** One short statement: the claim is its own transaction, committed before any network I/O. */
  async #claim(): Promise<OutboxRow[]> {
    const now = this.#clock.now()
    const rows = await this.#db
      .updateTable('mail_outbox')
      .set((eb) => ({
        lease_until: new Date(now.getTime() + this.#leaseMs),
        attempts: eb('attempts', '+', 1),
      }))
      .where('id', 'in', (eb) =>
        eb
          .selectFrom('mail_outbox')
          .select('id')
          .where('sent_at', 'is', null)
          .where('failed_at', 'is', null)
          .where('next_attempt_at', '<=', now)
          .where((w) => w.or([w('lease_until', 'is', null), w('lease_until', '<', now)]))
          .orderBy('id')
          .limit(this.#batchSize)
          .forUpdate()
          .skipLocked(),
      )
      .returningAll()
      .execute()
    return rows.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1))
  }

  async #deliver(row: OutboxRow): Promise<void> {
    const messageId = `<${row.message_id}@${this.#domain}>`
    try {
      if (!SINGLE_ADDRESS.test(row.recipient))
        throw new PermanentMailError('the recipient is not one address')
      const data = unsealMailData(this.#box, row.data)
      const rendered = await this.#templates.renderStored(row.template, data, {
        organizationId: row.organization_id,
      })
      await this.#transport.send({ from: this.#from, to: row.recipient, messageId, ...rendered })
    } catch (error) {
      await this.#recordFailure(row, messageId, error)
      return
    }
    const sentAt = this.#clock.now()
    try {
      await this.#recordSent(row.id, sentAt)
    } catch (error) {
      // Sent but not recorded: retried before the next claim, well within the lease.
      this.#unrecorded.set(row.id, sentAt)
      this.#log.error({ err: error, outboxId: row.id, messageId }, 'recording a sent mail failed')
      return
    }
    this.#log.info({ outboxId: row.id, messageId, template: row.template }, 'mail sent')
  }

  async #recordSent(id: string, sentAt: Date): Promise<void> {
    await this.#db
      .updateTable('mail_outbox')
      // The data goes with the delivery: a sent message keeps no link or personal data at rest.
      .set({ sent_at: sentAt, lease_until: null, last_error: null, data: '{}' })
      .where('id', '=', id)
      .where('sent_at', 'is', null)
      .execute()
  }

  async #recordUnrecorded(): Promise<void> {
    for (const [id, sentAt] of this.#unrecorded) {
      await this.#recordSent(id, sentAt)
      this.#unrecorded.delete(id)
    }
  }

  async #recordFailure(row: OutboxRow, messageId: string, error: unknown): Promise<void> {
    const now = this.#clock.now()
    const permanent = error instanceof PermanentMailError || error instanceof UnknownTemplateError
    const giveUp = permanent || row.attempts >= this.#maxAttempts
    const description = describeMailError(error)
    const nextAttemptAt = new Date(now.getTime() + retryDelayMs(row.attempts))
    await this.#db
      .updateTable('mail_outbox')
      .set({
        lease_until: null,
        last_error: errorText(description),
        ...(giveUp ? { failed_at: now, data: '{}' } : { next_attempt_at: nextAttemptAt }),
      })
      .where('id', '=', row.id)
      .where('sent_at', 'is', null)
      // Only while the lease is still ours; after it expired another worker owns the row.
      .where('lease_until', '=', row.lease_until ?? now)
      .execute()
    const fields = {
      outboxId: row.id,
      messageId,
      template: row.template,
      attempts: row.attempts,
      error: description,
    }
    if (giveUp) this.#log.error(fields, 'mail delivery failed; giving up')
    else this.#log.warn({ ...fields, nextAttemptAt }, 'mail delivery failed; will retry')
  }

  /** Gives claimed rows back untouched (stopping, or too little lease left to send them safely). */
  async #release(rows: OutboxRow[]): Promise<void> {
    for (const row of rows) {
      await this.#db
        .updateTable('mail_outbox')
        .set((eb) => ({ lease_until: null, attempts: eb('attempts', '-', 1) }))
        .where('id', '=', row.id)
        .where('sent_at', 'is', null)
        .where('lease_until', '=', row.lease_until ?? this.#clock.now())
        .execute()
    }
  }
}
