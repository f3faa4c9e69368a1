import { describe, expect, it } from 'vitest'
import { asUser, confirmPassword, expectProblem, newActor, uniqueEmail } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Decisions 6: the invitation and password-reset endpoints are rate limited per client IP
// (here two a minute) before any work is done.
const t = useTestApp({ config: { 'platform.auth.rate-limit.login-per-minute': '2' } })

describe('rate limits on account endpoints', () => {
  it('answers the third invitation from one IP within a minute with 429 RATE_LIMITED', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const invite = () =>
      asUser(t.app, admin.session, {
        method: 'POST',
        url: '/api/users',
        payload: { email: uniqueEmail('invitee'), organizationId: admin.user.organizationId },
      })
    expect((await invite()).statusCode).toBe(202)
    expect((await invite()).statusCode).toBe(202)
    const limited = await invite()
    expectProblem(limited, 429, 'RATE_LIMITED')
    expect(limited.headers['retry-after']).toBeDefined()
  })

  it('answers the third reset confirmation from one IP within a minute with 429, before the token is looked at', async () => {
    expectProblem(
      await confirmPassword(t.app, 'made-up-token-1', 'a long enough password'),
      400,
      'INVALID_TOKEN',
    )
    expectProblem(
      await confirmPassword(t.app, 'made-up-token-2', 'a long enough password'),
      400,
      'INVALID_TOKEN',
    )
    expectProblem(
      await confirmPassword(t.app, 'made-up-token-3', 'a long enough password'),
      429,
      'RATE_LIMITED',
    )
  })
})
