import { describe, expect, it } from 'vitest'
import { redactUrl } from '../src/logger.ts'
import { useTestApp } from './helpers/app.ts'

const t = useTestApp({
  configure: (app) => {
    app.post('/test/log-body', { config: { public: true } }, async (request) => {
      request.log.info({ body: request.body, ...(request.body as object) }, 'handling')
      return {}
    })
  },
})

describe('log redaction', () => {
  it('never writes cookies, authorization, API keys or credential fields to the log', async () => {
    const secrets = {
      cookie: 'access_token=cookie-secret-1; refresh_token=cookie-secret-2',
      bearer: 'Bearer bearer-secret-3',
      apiKey: 'sk_live_apikey-secret-4',
      password: 'password-secret-5',
      token: 'token-secret-6',
      clientSecret: 'client-secret-7',
      query: 'query-secret-8',
    }
    const res = await t.app.inject({
      method: 'POST',
      url: `/test/log-body?token=${secrets.query}&page=2`,
      headers: { cookie: secrets.cookie, authorization: secrets.bearer, 'x-api-key': secrets.apiKey },
      payload: {
        password: secrets.password,
        token: secrets.token,
        clientSecret: secrets.clientSecret,
        name: 'visible',
      },
    })
    expect(res.statusCode).toBe(200)
    const text = t.logs.text()
    expect(text).toContain('visible')
    expect(text).toContain('[REDACTED]')
    for (const secret of Object.values(secrets)) {
      expect(text).not.toContain(
        secret
          .replace(/^Bearer /, '')
          .split('=')
          .pop(),
      )
    }
    expect(text).toContain('page=2')
  })

  it('redacts credential-like query parameters in logged URLs', () => {
    expect(redactUrl('/reset?token=abc&x=1')).toBe('/reset?token=%5BREDACTED%5D&x=1')
    expect(redactUrl('/plain')).toBe('/plain')
  })
})
