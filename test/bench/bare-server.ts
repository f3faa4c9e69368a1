// The floors every scenario is measured against, in the same run on the same machine:
// - /bare: a bare Fastify route, no plugins, logging off;
// - /floor/jwt (floor A): @fastify/cookie and a cached fast-jwt HS256 verify of the access cookie;
// - /floor/pk (floor B): floor A plus one primary-key read of the token's session through Kysely
//   and pg, against the same PostgreSQL as the service (FLOOR_DATABASE_URL).
import cookie from '@fastify/cookie'
import { createVerifier } from 'fast-jwt'
import Fastify from 'fastify'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'

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
await app.listen({ host: '127.0.0.1', port: Number(process.env.PLATFORM_SERVER_PORT) })
process.once(
  'SIGTERM',
  () =>
    void app.close().then(async () => {
      await db?.destroy()
      process.exit(0)
    }),
)
