// The floors every scenario is measured against, in the same run on the same machine:
// - /bare: a bare Fastify route, no plugins, logging off;
// - /floor/jwt (floor A): @fastify/cookie and a cached fast-jwt HS256 verify of the access cookie;
// - /floor/pk (floor B): floor A plus one primary-key read of the token's session through Kysely
//   and pg, against the same PostgreSQL as the service (FLOOR_DATABASE_URL);
// - /floor/argon2 (floor C): one argon2id verification at the service's default cost (its
//   configuration's defaults) of a hash made at start, straight through @node-rs/argon2 with no
//   queue: the rate this machine verifies passwords at, which bounds the service's logins.
import cookie from '@fastify/cookie'
import { hash as argon2Hash, verify as argon2Verify } from '@node-rs/argon2'
import { createVerifier } from 'fast-jwt'
import Fastify from 'fastify'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { loadConfig } from '../../src/config.ts'
import { argon2idOptions, hashParameters } from '../../src/security/passwords.ts'

const verify = createVerifier({
  key: Buffer.from(process.env.FLOOR_JWT_SECRET ?? '', 'base64'),
  algorithms: ['HS256'],
  cache: true,
})
const url = process.env.FLOOR_DATABASE_URL
const db = url
  ? new Kysely<Record<string, never>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 10 }) }),
    })
  : undefined

const ARGON2_PASSWORD = 'bench-password-0123456789'
const serviceCost = hashParameters(
  loadConfig({ 'platform.auth.jwt.secret': process.env.FLOOR_JWT_SECRET ?? '' }).auth.password,
)
const argon2Stored = await argon2Hash(ARGON2_PASSWORD, argon2idOptions(serviceCost))

const app = Fastify({ logger: false })
await app.register(cookie)
app.get('/bare', async () => ({ status: 'UP' }))
app.get('/health/live', async () => ({ status: 'UP' }))
app.get('/floor/jwt', async (request, reply) => {
  try {
    const claims = verify(request.cookies.access_token ?? '') as { sub: string }
    return { userId: claims.sub }
  } catch {
    return reply.code(401).send({ code: 'AUTHENTICATION_REQUIRED' })
  }
})
app.get('/floor/pk', async (request, reply) => {
  let claims: { sid: string }
  try {
    claims = verify(request.cookies.access_token ?? '') as { sid: string }
  } catch {
    return reply.code(401).send({ code: 'AUTHENTICATION_REQUIRED' })
  }
  if (!db) return reply.code(503).send({ code: 'SERVICE_UNAVAILABLE' })
  const { rows } = await sql<{ id: string; user_id: string }>`
    select id, user_id from sessions where id = ${claims.sid}`.execute(db)
  return rows[0] ?? reply.code(404).send({ code: 'NOT_FOUND' })
})
app.post('/floor/argon2', async () => ({ match: await argon2Verify(argon2Stored, ARGON2_PASSWORD) }))
await app.listen({ host: '127.0.0.1', port: Number(process.env.PLATFORM_SERVER_PORT) })
process.once(
  'SIGTERM',
  () =>
    void app.close().then(async () => {
      await db?.destroy()
      process.exit(0)
    }),
)
