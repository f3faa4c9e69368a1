import { describe, expect, it } from 'vitest'
import { asUser, confirmPassword, expectProblem, newActor, uniqueEmail } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// The invitation (a resent one too), password-reset and password-change endpoints are rate limited
// per client IP (here two a minute) before any work is done, each by a setting of its own: the login and reset-per-hour settings,
// set lower here, drive neither.
const t = useTestApp({
  config: {
    'platform.auth.rate-limit.invite-per-minute': '2',
    'platform.auth.rate-limit.invite-per-hour': '2',
    'platform.auth.rate-limit.reset-per-minute': '2',
    'platform.auth.rate-limit.login-per-minute': '1',
    'platform.auth.rate-limit.reset-per-hour': '1',
  },
})

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

  it('counts invitations of one email by invite-per-hour, not by the password reset allowance', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const email = uniqueEmail('twice-invited')
    // From three addresses, so the per-address allowance is not what answers.
    const invite = (address: string) =>
      asUser(t.app, admin.session, {
        method: 'POST',
        url: '/api/users',
        payload: { email, organizationId: admin.user.organizationId },
        remoteAddress: address,
      })
    expect((await invite('198.51.100.1')).statusCode).toBe(202)
    expectProblem(await invite('198.51.100.2'), 409, 'ACCOUNT_EXISTS')
    expectProblem(await invite('198.51.100.3'), 429, 'RATE_LIMITED')
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

  it('counts a resent invitation with the invitations from its IP (invite-per-minute)', async () => {
    const admin = await newActor(t.app, { role: 'admin' })
    const remoteAddress = '198.51.100.21'
    const invited = await asUser(t.app, admin.session, {
      method: 'POST',
      url: '/api/users',
      payload: { email: uniqueEmail('invitee'), organizationId: admin.user.organizationId },
      remoteAddress,
    })
    expect(invited.statusCode).toBe(202)
    const resend = () =>
      asUser(t.app, admin.session, {
        method: 'POST',
        url: `/api/users/${invited.json().userId}/resend-invitation`,
        remoteAddress,
      })
    expect((await resend()).statusCode).toBe(202)
    const limited = await resend()
    expectProblem(limited, 429, 'RATE_LIMITED')
    expect(limited.headers['retry-after']).toBeDefined()
  })

  it('answers the third password change from one IP within a minute with 429, before the password is verified', async () => {
    const { user, session } = await newActor(t.app)
    const change = (currentPassword: string) =>
      asUser(t.app, session, {
        method: 'POST',
        url: '/api/auth/password/change',
        payload: { currentPassword, newPassword: 'a long enough password' },
        remoteAddress: '198.51.100.22',
      })
    expectProblem(await change('not the password'), 401, 'INVALID_CREDENTIALS')
    expectProblem(await change('not the password'), 401, 'INVALID_CREDENTIALS')
    expectProblem(await change(user.password), 429, 'RATE_LIMITED')
    const account = await t.app.db
      .selectFrom('accounts')
      .select('failed_attempts')
      .where('id', '=', user.id)
      .executeTakeFirstOrThrow()
    expect(account.failed_attempts).toBe(2)
  })
})
