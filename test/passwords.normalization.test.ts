import { describe, expect, it } from 'vitest'
import { PasswordHasher } from '../src/security/passwords.ts'
import { FAST_LOGIN_CONFIG, login, newUser } from './helpers/accounts.ts'
import { useTestApp } from './helpers/app.ts'

// Passwords are compared in Unicode NFKC (NIST 800-63B 5.1.1.2): the same
// password typed with a composed or a decomposed accent, or in full-width forms, is the same password.

const composed = 'caf\u00e9 au lait, s\u2019il vous pla\u00eet'
const decomposed = composed.normalize('NFD')
const fullWidth = 'ｐａｓｓｗｏｒｄ　ｗｉｔｈ　ｆｕｌｌ　ｗｉｄｔｈ'

describe('password normalization', () => {
  it('verifies a password hashed composed when typed decomposed, and full-width as ASCII', async () => {
    const hasher = await PasswordHasher.create({ memoryKib: 1024, iterations: 1, parallelism: 1 })
    expect(decomposed).not.toBe(composed)
    expect(await hasher.verify(await hasher.hash(composed), decomposed)).toBe(true)
    expect(await hasher.verify(await hasher.hash(decomposed), composed)).toBe(true)
    expect(await hasher.verify(await hasher.hash(fullWidth), 'password with full width')).toBe(true)
    expect(await hasher.verify(await hasher.hash(composed), 'cafe au lait, s\u2019il vous plait')).toBe(false)
  })

  const t = useTestApp({ config: FAST_LOGIN_CONFIG })

  it('signs in with the decomposed form of a password set composed', async () => {
    const user = await newUser(t.app)
    await t.app.db
      .updateTable('accounts')
      .set({ password_hash: await t.app.services.passwords.hash(composed) })
      .where('id', '=', user.id)
      .execute()
    expect((await login(t.app, user.email, decomposed)).statusCode).toBe(200)
  })
})
