import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import type { Clock } from '../clock.ts'
import type { Config } from '../config.ts'
import type { Database, Tx } from '../db/schema.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../housekeeping/runner.ts'
import { type OutboxHandler, OutboxWorker, type OutboxWorkerOptions, retryDelayMs } from '../outbox/engine.ts'
import { SecretBox } from '../security/secret-box.ts'
import {
  claimMail,
  deleteFinishedMail,
  insertMail,
  type MailOutboxRow,
  markMailFailed,
  markMailSent,
  releaseMail,
} from './outbox-store.ts'
import {
  type MailTemplateData,
  type MailTemplateName,
  MailTemplates,
  UnknownTemplateError,
} from './templates.ts'
import type { MailTransport } from './transports.ts'

// The mail kind of the outbox engine (src/outbox/engine.ts). A worker claims due rows with a lease
// in one short statement (FOR UPDATE SKIP LOCKED, so instances on one database never claim the
// same row), sends outside any transaction (PGlite is one connection, and a pooled connection must
// not wait on SMTP), then records the outcome. The Message-ID is the same on every attempt, so a
// receiver can drop the copy that a crash between "sent" and "recorded" would cause.

/** Attempts before a message is dead-lettered: with the engine's backoff, 35 to 70 minutes of failures. */
export const MAIL_MAX_ATTEMPTS = 20
const DEFAULT_BATCH_SIZE = 10
/** Longer than any batch of sends can take with the SMTP timeouts, so a live worker keeps its rows. */
const DEFAULT_LEASE_MS = 5 * 60 * 1000
/** A row is only sent while this much of its lease remains; otherwise it is released. */
const LEASE_MARGIN_MS = 60 * 1000
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
  const row = await insertMail(trx, {
    template: message.template,
    recipient: message.to,
    data: JSON.stringify(message.data),
    organizationId: message.organizationId ?? null,
    now,
  })
  return { id: row.id, messageId: row.message_id }
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

type OutboxRow = MailOutboxRow

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
  /** Wakes the worker when a message is queued on any instance (`DatabaseHandle.listen`). */
  listen?: OutboxWorkerOptions['listen']
  /** Rows claimed per statement (default 10). */
  batchSize?: number
  leaseMs?: number
  pollIntervalMs?: number
  maxAttempts?: number
  /** The retry jitter's source (tests pin it). */
  random?: () => number
}

/** Delivers the mail outbox. Several workers (instances) on one database send each message once. */
export class MailOutboxWorker extends OutboxWorker {
  constructor(options: MailOutboxWorkerOptions) {
    super({
      kind: 'mail',
      handler: new MailDelivery(options),
      log: options.log,
      listen: options.listen,
      pollIntervalMs: options.pollIntervalMs,
    })
  }
}

class MailDelivery implements OutboxHandler {
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
  readonly #maxAttempts: number
  readonly #random: () => number
  /** Rows sent whose "sent" could not be recorded (database down): recorded first on the next run. */
  readonly #unrecorded = new Map<string, Date>()

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
    this.#maxAttempts = options.maxAttempts ?? MAIL_MAX_ATTEMPTS
    this.#random = options.random ?? Math.random
  }

  async drain(stopping: () => boolean): Promise<number> {
    await this.#recordUnrecorded()
    let attempted = 0
    while (!stopping()) {
      const rows = await claimMail(this.#db, this.#clock.now(), this.#leaseMs, this.#batchSize)
      // The messages of a batch are independent (each has its own lease, Message-ID and outcome), so
      // they are sent at once: one slow SMTP round trip no longer holds up the nine others, and
      // delivery keeps pace with traffic (the soak found a one-at-a-time worker falling behind).
      let released = false
      await Promise.all(
        rows.map(async (row) => {
          const leaseLeft = (row.lease_until?.getTime() ?? 0) - this.#clock.now().getTime()
          if (stopping() || leaseLeft < LEASE_MARGIN_MS) {
            released = true
            await releaseMail(this.#db, row)
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

  async stopped(): Promise<void> {
    await this.#recordUnrecorded()
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
      await markMailSent(this.#db, row.id, sentAt)
    } catch (error) {
      // Sent but not recorded: retried before the next claim, well within the lease.
      this.#unrecorded.set(row.id, sentAt)
      this.#log.error({ err: error, outboxId: row.id, messageId }, 'recording a sent mail failed')
      return
    }
    this.#log.info({ outboxId: row.id, messageId, template: row.template }, 'mail sent')
  }

  async #recordUnrecorded(): Promise<void> {
    for (const [id, sentAt] of this.#unrecorded) {
      await markMailSent(this.#db, id, sentAt)
      this.#unrecorded.delete(id)
    }
  }

  async #recordFailure(row: OutboxRow, messageId: string, error: unknown): Promise<void> {
    const now = this.#clock.now()
    const permanent = error instanceof PermanentMailError || error instanceof UnknownTemplateError
    const giveUp = permanent || row.attempts >= this.#maxAttempts
    const description = describeMailError(error)
    const nextAttemptAt = new Date(now.getTime() + retryDelayMs(row.attempts, this.#random))
    await markMailFailed(this.#db, row, {
      lastError: errorText(description),
      ...(giveUp ? { failedAt: now } : { nextAttemptAt }),
      now,
    })
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
}

/**
 * Retention: a message sent or given up is kept `platform.retention.outbox`, then goes; one still to
 * send stays whatever its age.
 */
export function mailOutboxRetention(config: Config): RetentionRule {
  const { outbox } = config.retention
  return {
    name: 'mail_outbox',
    sweep: (db, now) => deleteFinishedMail(db, secondsBefore(now, outbox), RETENTION_BATCH),
  }
}
