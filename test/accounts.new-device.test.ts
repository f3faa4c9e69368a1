import { beforeEach, describe, expect, it } from 'vitest'
import {
  ACCOUNT_TEST_CONFIG,
  deliverMail,
  mailsTo,
  newUser,
  signIn,
  useMailTestApp,
} from './helpers/accounts.ts'
import { useTestAppBeside } from './helpers/app.ts'

// The new-device notice (an operation nothing triggers by default): with the opt-in
// setting, a login from a User-Agent the account has not used before mails the user, except for the
// account's very first device. The check runs after the login response (app.background).

const BROWSER_A = 'Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0'
const BROWSER_B = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15'

const t = useMailTestApp({ config: { 'platform.auth.new-device-notice.enabled': 'true' } })

beforeEach(async () => {
  await deliverMail(t)
  t.smtp.clear()
})

const outboxFor = (email: string) =>
  t.app.db.selectFrom('mail_outbox').select('template').where('recipient', '=', email).execute()

describe('new-device notice, enabled', () => {
  it('mails nothing for the first device, once for a new one naming its user agent, and not again for it', async () => {
    const user = await newUser(t.app)

    await signIn(t.app, user, { userAgent: BROWSER_A })
    expect(await deliverMail(t)).toBe(0)
    expect(await mailsTo(t.smtp, user.email)).toEqual([])

    const onB = await signIn(t.app, user, { userAgent: BROWSER_B })
    expect(await deliverMail(t)).toBe(1)
    const mails = await mailsTo(t.smtp, user.email)
    expect(mails).toHaveLength(1)
    expect(mails[0]?.subject).toBe('New sign-in to your account')
    expect(mails[0]?.text).toContain(`Device: ${BROWSER_B}`)
    expect(mails[0]?.text).not.toContain(onB.access)

    await signIn(t.app, user, { userAgent: BROWSER_B })
    await signIn(t.app, user, { userAgent: BROWSER_A })
    expect(await deliverMail(t)).toBe(0)
    expect(await mailsTo(t.smtp, user.email)).toHaveLength(1)
  })

  it("counts devices per account: another account's first device is not news", async () => {
    const first = await newUser(t.app)
    const second = await newUser(t.app)
    await signIn(t.app, first, { userAgent: BROWSER_A })
    await signIn(t.app, second, { userAgent: BROWSER_B })
    expect(await deliverMail(t)).toBe(0)
    expect(await outboxFor(second.email)).toEqual([])
  })
})

describe('new-device notice, off (the default)', () => {
  const off = useTestAppBeside(t, () => ({
    clock: t.clock,
    config: ACCOUNT_TEST_CONFIG,
    deps: { mailTransport: t.transport },
  }))

  it('never mails, whatever the user agents', async () => {
    expect(off.config.auth.newDeviceNotice.enabled).toBe(false)
    const user = await newUser(off.app)
    for (const userAgent of [BROWSER_A, BROWSER_B, 'curl/8.9.1', BROWSER_B]) {
      await signIn(off.app, user, { userAgent })
    }
    expect(await deliverMail(off)).toBe(0)
    expect(await outboxFor(user.email)).toEqual([])
    expect(await mailsTo(t.smtp, user.email)).toEqual([])
  })
})
