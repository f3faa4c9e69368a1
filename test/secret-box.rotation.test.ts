import { randomBytes } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { SecretBox } from '../src/security/secret-box.ts'

// Secrets at rest (TOTP secrets, token links in the mail outbox) survive a rotation of the JWT
// secret: the new secret seals, the previous ones still open what they sealed.

describe('secret box rotation', () => {
  const old = randomBytes(32)
  const current = randomBytes(32)

  it('opens what a previous secret sealed, and seals with the current one', () => {
    const sealedBefore = new SecretBox([old], 'purpose').seal('the secret')
    const rotated = new SecretBox([current, old], 'purpose')
    expect(rotated.open(sealedBefore)).toBe('the secret')
    const sealedAfter = rotated.seal('the secret')
    expect(() => new SecretBox([old], 'purpose').open(sealedAfter)).toThrow()
    expect(new SecretBox([current], 'purpose').open(sealedAfter)).toBe('the secret')
  })

  it('refuses a box once its secret is dropped, another purpose, and a tampered box', () => {
    const sealed = new SecretBox([old], 'purpose').seal('the secret')
    expect(() => new SecretBox([current], 'purpose').open(sealed)).toThrow()
    expect(() => new SecretBox([old], 'another purpose').open(sealed)).toThrow()
    const parts = sealed.split('.')
    parts[4] = Buffer.from('something else').toString('base64url')
    expect(() => new SecretBox([old], 'purpose').open(parts.join('.'))).toThrow()
  })
})
