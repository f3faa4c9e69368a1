import { describe, expect, it, vi } from 'vitest'
import { newUser, PASSWORD } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Account lockout (default limits: 5 attempts, 15 minutes), including parallel attempts,
// which must not get past the limit.

const WRONG = 'not the password at all'
const MAX_ATTEMPTS = 5
const LOCK_MINUTES = 15

// The login rate limit is raised so that only the lockout rules decide these answers.
const t = useTestApp({ config: { 'platform.auth.rate-limit.login-per-minute': '1000' } })

/** A member of a new organization. */
const newAccount = () => newUser(t.app)

async function attempt(email: string, password: string): Promise<{ status: number; code?: string }> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/api/auth/login',
    payload: { username: email, password },
  })
  return { status: res.statusCode, code: res.statusCode === 200 ? undefined : res.json().code }
}

const stored = (id: string) =>
  t.app.db
    .selectFrom('accounts')
    .select(['failed_attempts', 'locked_until'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow()

const OK = { status: 200, code: undefined }
const INVALID = { status: 401, code: 'INVALID_CREDENTIALS' }
const LOCKED = { status: 401, code: 'ACCOUNT_LOCKED' }

async function lock(email: string): Promise<void> {
  for (let i = 0; i < MAX_ATTEMPTS; i++) expect(await attempt(email, WRONG)).toEqual(INVALID)
}

describe('account lockout', () => {
  it('locks the account after 5 wrong passwords: the correct password then answers 401 ACCOUNT_LOCKED', async () => {
    const account = await newAccount()
    await lock(account.email)
    const state = await stored(account.id)
    expect(state.failed_attempts).toBe(MAX_ATTEMPTS)
    expect(state.locked_until?.getTime()).toBe(t.clock.now().getTime() + LOCK_MINUTES * 60_000)

    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { username: account.email, password: PASSWORD },
    })
    expect(res.statusCode).toBe(401)
    expect(res.json().code).toBe('ACCOUNT_LOCKED')
    expect(res.headers['set-cookie']).toBeUndefined()
  })

  it('does not lock before the 5th wrong password', async () => {
    const account = await newAccount()
    for (let i = 0; i < MAX_ATTEMPTS - 1; i++) expect(await attempt(account.email, WRONG)).toEqual(INVALID)
    expect(await stored(account.id)).toEqual({ failed_attempts: MAX_ATTEMPTS - 1, locked_until: null })
    expect(await attempt(account.email, PASSWORD)).toEqual(OK)
  })

  it('unlocks after 15 minutes: the correct password works and the counter is reset', async () => {
    const account = await newAccount()
    await lock(account.email)
    t.clock.advanceSeconds(LOCK_MINUTES * 60 - 1)
    expect(await attempt(account.email, PASSWORD)).toEqual(LOCKED)
    t.clock.advanceSeconds(1)
    expect(await attempt(account.email, PASSWORD)).toEqual(OK)
    expect(await stored(account.id)).toEqual({ failed_attempts: 0, locked_until: null })
  })

  it('does not count wrong passwords during the lock, nor extend it', async () => {
    const account = await newAccount()
    await lock(account.email)
    const before = await stored(account.id)
    t.clock.advanceSeconds(60)
    for (let i = 0; i < 3; i++) expect(await attempt(account.email, WRONG)).toEqual(LOCKED)
    expect(await stored(account.id)).toEqual(before)
    t.clock.advanceSeconds(LOCK_MINUTES * 60 - 60)
    expect(await attempt(account.email, PASSWORD)).toEqual(OK)
  })

  it('starts a new count once the lock has expired', async () => {
    const account = await newAccount()
    await lock(account.email)
    t.clock.advanceSeconds(LOCK_MINUTES * 60)
    expect(await attempt(account.email, WRONG)).toEqual(INVALID)
    expect(await stored(account.id)).toEqual({ failed_attempts: 1, locked_until: null })
    expect(await attempt(account.email, PASSWORD)).toEqual(OK)
  })

  it('resets the counter on a successful login', async () => {
    const account = await newAccount()
    for (let i = 0; i < MAX_ATTEMPTS - 1; i++) expect(await attempt(account.email, WRONG)).toEqual(INVALID)
    expect(await attempt(account.email, PASSWORD)).toEqual(OK)
    expect(await stored(account.id)).toEqual({ failed_attempts: 0, locked_until: null })
    for (let i = 0; i < MAX_ATTEMPTS - 1; i++) expect(await attempt(account.email, WRONG)).toEqual(INVALID)
    expect(await attempt(account.email, PASSWORD)).toEqual(OK)
  })

  it('holds the limit under parallel wrong passwords: exactly 5 are counted and the account is locked', async () => {
    const account = await newAccount()
    const results = await Promise.all(Array.from({ length: 12 }, () => attempt(account.email, WRONG)))
    for (const result of results) {
      expect(result.status).toBe(401)
      expect(['INVALID_CREDENTIALS', 'ACCOUNT_LOCKED']).toContain(result.code)
    }
    expect(results.filter((r) => r.code === 'INVALID_CREDENTIALS')).toHaveLength(MAX_ATTEMPTS)
    expect((await stored(account.id)).failed_attempts).toBe(MAX_ATTEMPTS)
    expect(await attempt(account.email, PASSWORD)).toEqual(LOCKED)
  })

  it('never answers 500 for a locked, deactivated, unknown or password-less account', async () => {
    const locked = await newAccount()
    await lock(locked.email)
    const deactivated = await newAccount()
    await t.app.db.updateTable('accounts').set({ active: false }).where('id', '=', deactivated.id).execute()
    const lockedAndDeactivated = await newAccount()
    await lock(lockedAndDeactivated.email)
    await t.app.db
      .updateTable('accounts')
      .set({ active: false })
      .where('id', '=', lockedAndDeactivated.id)
      .execute()
    // An invited account holds an unusable hash until a password is set.
    const invited = await newAccount()
    await t.app.db
      .updateTable('accounts')
      .set({ password_hash: '!unusable!not-an-argon2-hash' })
      .where('id', '=', invited.id)
      .execute()

    for (const password of [PASSWORD, WRONG]) {
      expect(await attempt(locked.email, password)).toEqual(LOCKED)
      expect(await attempt(deactivated.email, password)).toEqual(INVALID)
      expect(await attempt('nobody-here@example.com', password)).toEqual(INVALID)
      expect(await attempt(invited.email, password)).toEqual(INVALID)
      // Deactivated wins over locked: it must stay indistinguishable from a wrong password.
      expect(await attempt(lockedAndDeactivated.email, password)).toEqual(INVALID)
    }
  })

  it('carries Retry-After with the seconds left on the lock', async () => {
    const account = await newAccount()
    await lock(account.email)
    t.clock.advanceSeconds(100)
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { username: account.email, password: PASSWORD },
    })
    expect(res.json().code).toBe('ACCOUNT_LOCKED')
    expect(res.headers['retry-after']).toBe(String(LOCK_MINUTES * 60 - 100))
  })
})

describe('lockout under a burst of parallel attempts', () => {
  it('verifies at most 5 passwords of a burst of 30, whatever it holds', async () => {
    const account = await newAccount()
    const verify = vi.spyOn(t.app.services.passwords, 'verify')
    try {
      const passwords = Array.from({ length: 30 }, (_, i) => (i === 17 ? PASSWORD : `${WRONG} ${i}`))
      const results = await Promise.all(passwords.map((password) => attempt(account.email, password)))
      expect(verify.mock.calls.length).toBeLessThanOrEqual(MAX_ATTEMPTS)
      expect(results.filter((r) => r.status === 200)).toEqual([])
      expect(results.filter((r) => r.code === 'ACCOUNT_LOCKED').length).toBeGreaterThanOrEqual(
        30 - MAX_ATTEMPTS,
      )
    } finally {
      verify.mockRestore()
    }
  })

  it('ends a burst of 9 wrong passwords and the right one locked, not logged in', async () => {
    const account = await newAccount()
    const passwords = [...Array.from({ length: 9 }, (_, i) => `${WRONG} ${i}`), PASSWORD]
    const results = await Promise.all(passwords.map((password) => attempt(account.email, password)))
    expect(results.filter((r) => r.status === 200)).toEqual([])
    const state = await stored(account.id)
    expect(state.failed_attempts).toBe(MAX_ATTEMPTS)
    expect(state.locked_until?.getTime()).toBeGreaterThan(t.clock.now().getTime())
    expect(await attempt(account.email, PASSWORD)).toEqual(LOCKED)
  })

  it('treats a burst of exactly 5 like 5 attempts in a row: 4 wrong and the right one signs in', async () => {
    const account = await newAccount()
    const passwords = [`${WRONG} 1`, `${WRONG} 2`, `${WRONG} 3`, `${WRONG} 4`, PASSWORD]
    const results = await Promise.all(passwords.map((password) => attempt(account.email, password)))
    expect(results[4]).toEqual(OK)
    expect(await stored(account.id)).toEqual({ failed_attempts: 0, locked_until: null })
  })

  it('lets the right password of a burst below the limit sign in and clear the count', async () => {
    const account = await newAccount()
    const passwords = [`${WRONG} 1`, `${WRONG} 2`, PASSWORD, `${WRONG} 3`]
    const results = await Promise.all(passwords.map((password) => attempt(account.email, password)))
    expect(results[2]).toEqual(OK)
    expect((await stored(account.id)).locked_until).toBeNull()
  })
})
