import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import { type AuditTrail, actorOf } from '../../audit/index.ts'
import { organizationAdmin, type Permissions } from '../../authz/permissions.ts'
import type { Clock } from '../../clock.ts'
import { inTransaction } from '../../db/database.ts'
import { page, rowsToRead } from '../../db/paging.ts'
import type { Database } from '../../db/schema.ts'
import type { TenantScope } from '../../db/tenant-scope.ts'
import { AppError, validationFailed } from '../../errors.ts'
import type { Principal } from '../../principal.ts'
import type { SecretBox } from '../../security/secret-box.ts'
import { checkWebhookUrl, WebhookTargetRefused } from './address-guard.ts'
import { messageBody, TEST_EVENT_TYPE } from './fan-out.ts'
import {
  type AttemptPageKey,
  type AttemptRow,
  countEndpoints,
  deleteEndpoint,
  type EndpointRow,
  findEndpoint,
  insertEndpoint,
  listAttempts,
  listEndpoints,
  queueMessage,
  updateEndpoint,
} from './repository.ts'
import { generateSecret } from './signing.ts'

/** Endpoints an organization may have. */
export const WEBHOOK_ENDPOINT_LIMIT = 20
/** How long a rotated secret still signs deliveries beside the new one. */
export const PREVIOUS_SECRET_HOURS = 24

export const toWebhook = (row: EndpointRow) => ({
  id: row.id,
  url: row.url,
  description: row.description,
  eventTypes: row.event_types,
  enabled: row.enabled,
  disabledReason: row.disabled_reason,
  previousSecretExpiresAt:
    row.previous_secret && row.previous_secret_expires_at
      ? (row.previous_secret_expires_at as Date).toISOString()
      : null,
  createdAt: (row.created_at as Date).toISOString(),
  updatedAt: (row.updated_at as Date).toISOString(),
})

export const toAttempt = (row: AttemptRow) => ({
  id: row.id,
  messageId: row.message_id,
  eventType: row.event_type,
  attempt: row.attempt,
  attemptedAt: (row.attempted_at as Date).toISOString(),
  statusCode: row.status_code,
  durationMs: row.duration_ms,
  error: row.error,
  outcome: row.outcome,
})

export interface WebhookInput {
  url: string
  eventTypes: string[]
  description?: string | undefined
  enabled?: boolean | undefined
}

/**
 * An organization's webhook endpoints, managed by its admins (asked through the authorization
 * port) and by API keys with `webhooks:write` (checked by the route guard). Every change is an
 * audit event of its own; the signing secret is returned once, when created or rotated, and kept
 * sealed.
 */
export class Webhooks {
  readonly #db: Kysely<Database>
  readonly #permissions: Permissions
  readonly #audit: AuditTrail
  readonly #clock: Clock
  readonly #box: SecretBox
  readonly #allowPrivateNetworks: boolean

  constructor(deps: {
    db: Kysely<Database>
    permissions: Permissions
    audit: AuditTrail
    clock: Clock
    box: SecretBox
    allowPrivateNetworks: boolean
  }) {
    this.#db = deps.db
    this.#permissions = deps.permissions
    this.#audit = deps.audit
    this.#clock = deps.clock
    this.#box = deps.box
    this.#allowPrivateNetworks = deps.allowPrivateNetworks
  }

  #authorize(principal: Principal): Promise<TenantScope> {
    return organizationAdmin(this.#permissions, principal)
  }

  #url(text: string): string {
    try {
      return checkWebhookUrl(text, this.#allowPrivateNetworks).href
    } catch (error) {
      if (error instanceof WebhookTargetRefused) throw validationFailed('body.url', error.message)
      throw error
    }
  }

  async create(principal: Principal, input: WebhookInput) {
    const tenant = await this.#authorize(principal)
    const url = this.#url(input.url)
    const secret = generateSecret()
    const now = this.#clock.now()
    const row = await inTransaction(this.#db, async (trx) => {
      // Counted under the organization's row lock, so two creates cannot both pass the limit.
      await trx
        .selectFrom('organizations')
        .select('id')
        .where('id', '=', tenant.organizationId)
        .forUpdate()
        .execute()
      if ((await countEndpoints(trx, tenant)) >= WEBHOOK_ENDPOINT_LIMIT)
        throw new AppError(
          'WEBHOOK_LIMIT_REACHED',
          `An organization has at most ${WEBHOOK_ENDPOINT_LIMIT} webhook endpoints`,
        )
      // It gets the events written after the position it notes (webhookFanOut): none of them may
      // be fanned out before it commits.
      await this.#audit.holdChain(trx, tenant.organizationId)
      // Its own creation is not among its messages (webhookFanOut).
      const id = randomUUID()
      await this.#recorded(trx, principal, tenant, 'webhook.created', id, { host: new URL(url).host })
      return insertEndpoint(trx, tenant, {
        id,
        url,
        description: input.description ?? '',
        eventTypes: [...new Set(input.eventTypes)],
        enabled: input.enabled ?? true,
        secret: this.#box.seal(secret),
        now,
      })
    })
    return { ...toWebhook(row), secret }
  }

  async list(principal: Principal) {
    const tenant = await this.#authorize(principal)
    return { items: (await listEndpoints(this.#db, tenant)).map(toWebhook) }
  }

  async get(principal: Principal, id: string) {
    const tenant = await this.#authorize(principal)
    return toWebhook(this.#found(await findEndpoint(this.#db, tenant, id)))
  }

  async update(principal: Principal, id: string, patch: Partial<WebhookInput>) {
    const tenant = await this.#authorize(principal)
    const url = patch.url === undefined ? undefined : this.#url(patch.url)
    const now = this.#clock.now()
    const row = await inTransaction(this.#db, async (trx) => {
      const current = this.#found(await findEndpoint(trx, tenant, id, { lock: true }))
      // Enabled again: it starts with a clean record.
      const reenabled = patch.enabled === true && !current.enabled
      const updated = await updateEndpoint(trx, tenant, id, {
        ...(url !== undefined ? { url } : {}),
        ...(patch.description !== undefined ? { description: patch.description } : {}),
        ...(patch.eventTypes !== undefined ? { event_types: [...new Set(patch.eventTypes)] } : {}),
        ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
        ...(reenabled ? { disabled_reason: null, consecutive_failures: 0, failing_since: null } : {}),
        updated_at: now,
      })
      const fields = Object.keys(patch)
        .filter((key) => patch[key as keyof WebhookInput] !== undefined)
        .sort()
        .join(',')
      await this.#recorded(trx, principal, tenant, 'webhook.updated', id, {
        fields,
        ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
      })
      return updated
    })
    return toWebhook(row)
  }

  async delete(principal: Principal, id: string): Promise<void> {
    const tenant = await this.#authorize(principal)
    await inTransaction(this.#db, async (trx) => {
      if (!(await deleteEndpoint(trx, tenant, id))) throw new AppError('NOT_FOUND', 'No such webhook')
      await this.#recorded(trx, principal, tenant, 'webhook.deleted', id, {})
    })
  }

  /** A new secret; the one it replaces still signs, beside it, for PREVIOUS_SECRET_HOURS. */
  async rotateSecret(principal: Principal, id: string) {
    const tenant = await this.#authorize(principal)
    const secret = generateSecret()
    const now = this.#clock.now()
    const expires = new Date(now.getTime() + PREVIOUS_SECRET_HOURS * 3600_000)
    const row = await inTransaction(this.#db, async (trx) => {
      const current = this.#found(await findEndpoint(trx, tenant, id, { lock: true }))
      const updated = await updateEndpoint(trx, tenant, id, {
        secret: this.#box.seal(secret),
        previous_secret: current.secret,
        previous_secret_expires_at: expires,
        updated_at: now,
      })
      await this.#recorded(trx, principal, tenant, 'webhook.secret_rotated', id, {})
      return updated
    })
    return { ...toWebhook(row), secret }
  }

  /** Queues a `webhook.test` message to the endpoint (sent once, even while it is disabled). */
  async test(principal: Principal, id: string) {
    const tenant = await this.#authorize(principal)
    const now = this.#clock.now()
    return inTransaction(this.#db, async (trx) => {
      this.#found(await findEndpoint(trx, tenant, id))
      const { message_id } = await queueMessage(trx, tenant, {
        endpointId: id,
        eventType: TEST_EVENT_TYPE,
        payload: messageBody(TEST_EVENT_TYPE, now, { webhookId: id }),
        now,
      })
      return { messageId: message_id }
    })
  }

  /** The endpoint's delivery attempts, newest first. */
  async attempts(principal: Principal, id: string, options: { limit: number; after?: AttemptPageKey }) {
    const tenant = await this.#authorize(principal)
    this.#found(await findEndpoint(this.#db, tenant, id))
    const rows = await listAttempts(this.#db, tenant, id, { ...options, limit: rowsToRead(options.limit) })
    const { items, next } = page(rows, options.limit, (last) => ({ id: last.id }))
    return { items: items.map(toAttempt), next }
  }

  #found(row: EndpointRow | undefined): EndpointRow {
    if (!row) throw new AppError('NOT_FOUND', 'No such webhook')
    return row
  }

  #recorded(
    trx: Parameters<AuditTrail['record']>[0],
    principal: Principal,
    tenant: TenantScope,
    type: 'webhook.created' | 'webhook.updated' | 'webhook.deleted' | 'webhook.secret_rotated',
    id: string,
    data: Record<string, string | boolean>,
  ) {
    return this.#audit.record(trx, {
      type,
      organizationId: tenant.organizationId,
      actor: actorOf(principal),
      subject: { type: 'webhook', id },
      data,
    })
  }
}
