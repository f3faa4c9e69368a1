import { describe, expect, it } from 'vitest'
import { buildApp } from '../src/app.ts'
import { testConfig } from './helpers/app.ts'
import { checkRepliesAgainstDocument, takeContractViolations } from './helpers/contract.ts'
import { createTestDatabase } from './helpers/database.ts'
import { startTestS3 } from './helpers/s3.ts'

// The reply checker that every test app runs catches what it is there to catch:
// an undocumented status, an undocumented media type and a body that does not match its schema.

describe('reply checking against the document', () => {
  it('records an undocumented status, media type and body, and passes a documented reply', async () => {
    const s3 = await startTestS3()
    const database = await createTestDatabase()
    const app = await buildApp(testConfig(s3.config), { logLevel: 'silent', database: database.handle })
    try {
      const Answer = {
        type: 'object',
        properties: { count: { type: 'integer' } },
        required: ['count'],
      }
      app.get('/x/ok', { config: { public: true }, schema: { response: { 200: Answer } } }, async () => ({
        count: 1,
      }))
      app.get(
        '/x/teapot',
        { config: { public: true }, schema: { response: { 200: Answer } } },
        async (_r, reply) => reply.code(418 as 200).send({ count: 1 }),
      )
      app.get(
        '/x/text',
        { config: { public: true }, schema: { response: { 200: Answer } } },
        async (_r, reply) => reply.type('text/plain').send('count=1'),
      )
      app.get(
        '/x/shape',
        { config: { public: true }, schema: { response: { 200: Answer } } },
        async (_r, reply) => reply.type('application/json').serializer(JSON.stringify).send({ total: 'one' }),
      )
      checkRepliesAgainstDocument(app)
      await app.ready()
      takeContractViolations()

      await app.inject({ method: 'GET', url: '/x/ok' })
      expect(takeContractViolations()).toEqual([])
      for (const url of ['/x/teapot', '/x/text', '/x/shape']) await app.inject({ method: 'GET', url })
      const found = takeContractViolations()
      expect(found).toHaveLength(3)
      expect(found[0]).toContain('status not in the document')
      expect(found[1]).toContain('media type text/plain')
      expect(found[2]).toContain('body does not match')
    } finally {
      await app.close()
      await database.dispose()
      await s3.close()
    }
  })
})
