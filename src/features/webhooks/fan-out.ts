import { type RawBuilder, sql } from 'kysely'
import { type AuditFanOut, publicEvent, type StoredEvent } from '../../audit/index.ts'

// How an audit event becomes webhook messages: one row in the webhook outbox for each enabled
// endpoint of the event's organization that subscribes to its type (or to `*`), written by the
// statement that appends the event (AuditTrail's fan-out), so a message exists exactly when the
// change it reports committed, at no extra round trip.

/** The type every endpoint can be sent with POST /api/webhooks/{id}/test, whatever it subscribes to. */
export const TEST_EVENT_TYPE = 'webhook.test'

/** The JSON body of a message (Standard Webhooks: type, timestamp, data). */
export function messageBody(type: string, timestamp: Date, data: unknown): string {
  return JSON.stringify({ type, timestamp: timestamp.toISOString(), data })
}

// An event of no organization (the system chain) runs the same statement, which matches no
// endpoint: a failed sign-in costs the same whether or not the account exists.
export const webhookFanOut: AuditFanOut = (event: StoredEvent): RawBuilder<unknown> => {
  const payload = messageBody(event.type, event.occurredAt, publicEvent(event))
  return sql`
    insert into webhook_outbox (endpoint_id, organization_id, event_type, payload, created_at, next_attempt_at)
    select id, organization_id, ${event.type}, ${payload}, ${event.occurredAt}, ${event.occurredAt}
    from webhook_endpoints
    where organization_id = ${event.organizationId} and enabled
      and event_types && array[${event.type}, '*']::text[]`
}
