import { describe, expect, it } from 'vitest'
import {
  asUser,
  confirmPassword,
  deliverMail,
  linkToken,
  mailsTo,
  newUser,
  requestPasswordReset,
  signIn,
  uniqueEmail,
  useMailTestApp,
} from './helpers/accounts.ts'

// No raw one-time token at rest: the mail outbox keeps the data of a message that
// carries a token link sealed (AES-GCM, key derived from the configured secret), and clears the data
// of every message once it is sent. Read straight from the table.

const t = useMailTestApp()

const outboxRows = (email: string) =>
  t.app.db.selectFrom('mail_outbox').select(['data', 'sent_at']).where('recipient', '=', email).execute()

describe('mail outbox at rest', () => {
  it('never holds the token of a reset link, before or after the mail is sent', async () => {
    const user = await newUser(t.app)
    await requestPasswordReset(t.app, user.email)
    await t.app.background.idle()
    const [queued] = await outboxRows(user.email)
    const atRest = JSON.stringify(queued?.data)
    expect(atRest).not.toContain('reset-password')
    expect(atRest).not.toContain('token')

    await deliverMail(t)
    const token = linkToken((await mailsTo(t.smtp, user.email)).at(-1), '/reset-password')
    expect(atRest).not.toContain(token)
    const [sent] = await outboxRows(user.email)
    expect(sent?.sent_at).not.toBeNull()
    expect(sent?.data).toEqual({})
    // The link in the email works.
    expect((await confirmPassword(t.app, token, 'a brand new passphrase')).statusCode).toBe(200)
  })

  it('never holds the token of an invitation link', async () => {
    const admin = await newUser(t.app, { role: 'admin' })
    const session = await signIn(t.app, admin)
    const email = uniqueEmail('invitee')
    await asUser(t.app, session, {
      method: 'POST',
      url: '/api/users',
      payload: { email, organizationId: admin.organizationId },
    })
    const [queued] = await outboxRows(email)
    await deliverMail(t)
    const token = linkToken((await mailsTo(t.smtp, email)).at(-1), '/accept-invitation')
    expect(JSON.stringify(queued?.data)).not.toContain(token)
    expect(JSON.stringify(queued?.data)).not.toContain('accept-invitation')
    expect((await outboxRows(email))[0]?.data).toEqual({})
  })
})
