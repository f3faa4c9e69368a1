// Idempotency-Key on POST creates, so that a client whose answer was lost can send the create again
// without making a second resource: a route with `config.idempotent` accepts the header (1-255
// visible ASCII). The first request with a key claims it and records its 2xx answer; the same key
// from the same principal within 24 h (platform.retention.idempotency-keys) gets that answer again
// (`Idempotent-Replayed: true`) without running the handler, and a copy sent while the first still
// runs waits for it, so 20 parallel copies make one resource. The same key with a different request
// is 409 IDEMPOTENCY_KEY_REUSED. A failed request gives its key back. Needs db, clock and auth (the
// principal).
import { createHash } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Type } from '@sinclair/typebox'
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  onSendHookHandler,
  preHandlerHookHandler,
} from 'fastify'
import fp from 'fastify-plugin'
import stringify from 'safe-stable-stringify'
import type { Config } from '../config.ts'
import type { AlongWith } from '../db/database.ts'
import { AppError, problemResponses } from '../errors.ts'
import { RETENTION_BATCH, type RetentionRule, secondsBefore } from '../housekeeping/runner.ts'
import {
  claimIdempotencyKey,
  deleteExpiredIdempotencyKeys,
  findIdempotencyKey,
  type IdempotencyKeyRow,
  recordIdempotentAnswer,
  releaseIdempotencyKey,
} from './idempotency-store.ts'
import { afterRateLimits } from './rate-limits.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Accepts Idempotency-Key (src/http/idempotency.ts). */
    idempotent?: boolean
  }
  interface FastifyRequest {
    /** The key this request claimed, answered in onSend unless recorded with the effect. */
    idempotencyKey?: { principalId: string; key: string; recorded?: boolean }
  }
}

const HEADER = 'idempotency-key'
/** How long a copy waits for the first request with its key to answer. */
const WAIT_MS = 10_000
const POLL_MS = 20
/** A claim this old without an answer belongs to a request that died with its process. */
const ABANDONED_MS = 60_000

const KeyHeader = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[\\x21-\\x7e]+$',
  description:
    'Makes the create safe to retry: the same key from the same caller within 24 h returns the first answer; with another request it is 409 IDEMPOTENCY_KEY_REUSED',
})

/** JSON with sorted keys: two spellings of one body are one request. */
const canonical = (value: unknown): string => stringify(value) ?? 'null'

function fingerprint(request: FastifyRequest): string {
  return createHash('sha256')
    .update(
      `${request.method} ${request.routeOptions.url}\n${canonical(request.params)}\n${canonical(request.body ?? null)}`,
    )
    .digest('base64url')
}

/** What an idempotent create answers: the route sends exactly this. */
export interface IdempotentAnswer {
  status: number
  location: string | null
  body: Record<string, unknown>
}

/**
 * For a create whose request claimed a key: records the answer in the create's own transaction
 * (given to the service as its `along`), so that the effect and its answer commit together. A
 * service that dies after the commit but before the response cannot leave the key unanswered, to
 * be taken for abandoned and run again: the retry gets the resource that was created. The body is
 * stored as the route's serializer writes it for that status.
 */
export function answerWithEffect<T>(
  request: FastifyRequest,
  reply: FastifyReply,
  answer: (result: T) => IdempotentAnswer,
): AlongWith<T> | undefined {
  const claimed = request.idempotencyKey
  if (!claimed) return undefined
  return async (trx, result) => {
    const { status, location, body } = answer(result)
    reply.code(status)
    await recordIdempotentAnswer(trx, claimed.principalId, claimed.key, {
      status,
      location,
      body: serialized(reply, status, body),
    })
    claimed.recorded = true
  }
}

/** Sends what `answerWithEffect` recorded (or would have): the route's one reply. */
function sendAnswer(reply: FastifyReply, { status, location, body }: IdempotentAnswer) {
  if (location) reply.header('location', location)
  return reply.code(status).send(body)
}

/**
 * The handler of an idempotent create: runs `create` with the `along` that records the answer in
 * the create's transaction (when the request claimed a key), then sends that answer.
 */
export async function idempotentCreate<T>(
  request: FastifyRequest,
  reply: FastifyReply,
  answer: (result: T) => IdempotentAnswer,
  create: (along: AlongWith<T> | undefined) => Promise<T>,
) {
  const result = await create(answerWithEffect(request, reply, answer))
  return sendAnswer(reply, answer(result))
}

/** `body` as the route's serializer for `status` writes it (a response declared per media type, or not). */
function serialized(reply: FastifyReply, status: number, body: Record<string, unknown>): string {
  const declared = (
    reply.routeOptions.schema?.response as Record<number, { content?: unknown }> | undefined
  )?.[status]
  return String(
    declared?.content
      ? reply.serializeInput(body, String(status), 'application/json')
      : reply.serializeInput(body, String(status)),
  )
}

function replay(reply: FastifyReply, row: IdempotencyKeyRow) {
  if (row.location) reply.header('location', row.location)
  return reply
    .code(row.status as number)
    .header('idempotent-replayed', 'true')
    .type('application/json; charset=utf-8')
    .send(row.body)
}

async function idempotencyPlugin(app: FastifyInstance) {
  // What an idempotent route documents: the header it accepts and its 409.
  app.addHook('onRoute', (route) => {
    if (!route.config?.idempotent || !route.schema) return
    const headers = (route.schema.headers ?? Type.Object({})) as ReturnType<typeof Type.Object>
    route.schema.headers = Type.Object({ ...headers.properties, [HEADER]: Type.Optional(KeyHeader) })
    route.schema.response = { ...problemResponses(409), ...(route.schema.response as object | undefined) }
  })
  // Hooks added to the routes whose config says `idempotent` (onRoute): the claim after the rate
  // limits' preHandler (afterRateLimits),
  // before the route's own hooks and handler; the answer is recorded or the key given back in onSend.
  const claimKey: preHandlerHookHandler = (request, reply, done) => {
    claim(request, reply).then(() => {
      if (!reply.sent) done()
    }, done)
  }
  const answerKey: onSendHookHandler = (request, reply, payload, done) => {
    if (!request.idempotencyKey) return done(null, payload)
    answer(request, reply, payload).then((answered) => done(null, answered), done)
  }
  app.addHook('onRoute', (route) => {
    if (!route.config?.idempotent) return
    const preHandler = [route.preHandler ?? []].flat()
    preHandler.splice(afterRateLimits(preHandler), 0, claimKey)
    route.preHandler = preHandler
    route.onSend = [...[route.onSend ?? []].flat(), answerKey]
  })

  async function claim(request: FastifyRequest, reply: FastifyReply) {
    const key = request.headers[HEADER]
    if (typeof key !== 'string' || !request.principal) return
    const principalId = request.principal.id
    const print = fingerprint(request)
    const deadline = Date.now() + WAIT_MS
    for (;;) {
      const now = app.clock.now()
      if (await claimIdempotencyKey(app.db, { principalId, key, fingerprint: print, now })) {
        request.idempotencyKey = { principalId, key }
        return
      }
      const row = await findIdempotencyKey(app.db, principalId, key)
      if (!row) continue // given back by a failed request: claim it again
      if (row.fingerprint !== print) {
        throw new AppError('IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was used for a different request')
      }
      if (row.status !== null) return replay(reply, row)
      if (now.getTime() - row.created_at.getTime() > ABANDONED_MS) {
        await releaseIdempotencyKey(app.db, principalId, key)
        continue
      }
      if (Date.now() > deadline) {
        throw new AppError(
          'IDEMPOTENCY_KEY_REUSED',
          'A request with this Idempotency-Key is still running; retry',
          {
            headers: { 'retry-after': '1' },
          },
        )
      }
      await sleep(POLL_MS)
    }
  }

  async function answer(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
    const claimed = request.idempotencyKey
    if (!claimed) return payload
    request.idempotencyKey = undefined
    const succeeded = reply.statusCode >= 200 && reply.statusCode < 300
    // Recorded in the create's transaction; a failure after it (the key's row then has an answer)
    // gives nothing back, and a rolled-back one left the row unanswered, released here. A route
    // that does not hand `answerWithEffect` to its service is answered here, after its commit.
    if (succeeded && claimed.recorded) return payload
    if (succeeded && typeof payload === 'string') {
      const location = reply.getHeader('location')
      await recordIdempotentAnswer(app.db, claimed.principalId, claimed.key, {
        status: reply.statusCode,
        location: typeof location === 'string' ? location : null,
        body: payload,
      })
    } else {
      await releaseIdempotencyKey(app.db, claimed.principalId, claimed.key)
    }
    return payload
  }
}

/** Retention: a key and its answer are kept `platform.retention.idempotency-keys`, then go. */
export function idempotencyKeyRetention(config: Config): RetentionRule {
  const { idempotencyKeys } = config.retention
  return {
    name: 'idempotency_keys',
    sweep: (db, now) =>
      deleteExpiredIdempotencyKeys(db, secondsBefore(now, idempotencyKeys), RETENTION_BATCH),
  }
}

export default fp(idempotencyPlugin, {
  name: 'idempotency',
  fastify: '5.x',
  dependencies: ['config', 'db', 'auth'],
})
