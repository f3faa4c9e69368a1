import { type RawBuilder, sql } from 'kysely'
import { type AuditFanOut, type LinkedEvent, publicEvent } from '../../audit/index.ts'

// How an audit event becomes webhook messages: one row in the webhook outbox for each enabled
// endpoint of the event's organization that subscribes to its type (or to `*`), written by the
// statement that chains the event (AuditChainer's fan-out), so a message exists exactly when the
// event has its place in the chain, at no extra round trip.

/** The type every endpoint can be sent with POST /api/webhooks/{id}/test, whatever it subscribes to. */
export const TEST_EVENT_TYPE = 'webhook.test'

/** The JSON body of a message (Standard Webhooks: type, timestamp, data). */
export function messageBody(type: string, timestamp: Date, data: unknown): string {
  return JSON.stringify({ type, timestamp: timestamp.toISOString(), data })
}

// An endpoint gets the events written after it was created (their position is above the one it
// noted), so not its own creation nor what was written before it and chained after: events are fanned
// out when chained, moments after they were written, and by then an endpoint created meanwhile
// exists. An endpoint created by the previous release noted no position: it gets the events that
// occurred from its creation on, but not its own creation. Events of no organization (the system
// chain) run the same statement, which matches no endpoint. Messages are queued in the events'
// chain order, so an endpoint receives them in that order.
export const webhookFanOut: AuditFanOut = (events: LinkedEvent[]): RawBuilder<unknown> => {
  const messages = JSON.stringify(
    events.map((event, order) => ({
      order,
      organization_id: event.organizationId,
      type: event.type,
      subject_id: event.subjectId,
      position: event.position,
      occurred_at: event.occurredAt.toISOString(),
      payload: messageBody(event.type, event.occurredAt, publicEvent(event)),
    })),
  )
  return sql`
    insert into webhook_outbox (endpoint_id, organization_id, event_type, payload, created_at, next_attempt_at)
    select w.id, w.organization_id, m.type, m.payload, m.occurred_at, m.occurred_at
    from jsonb_to_recordset(${messages}::jsonb)
      as m("order" int, organization_id uuid, type text, subject_id text, position bigint, occurred_at timestamptz,
        payload text)
    join webhook_endpoints w on w.organization_id = m.organization_id and w.enabled
      and w.event_types && array[m.type, '*']::text[]
      and case when w.audit_position is not null then m.position > w.audit_position
        else w.created_at <= m.occurred_at and not (m.type = 'webhook.created' and m.subject_id = w.id::text) end
    order by m."order", w.id`
}
