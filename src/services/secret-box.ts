import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto'

/**
 * Authenticated encryption (AES-256-GCM) for secrets kept at rest, such as TOTP secrets. The key is
 * derived with HKDF from the JWT secret under a purpose label, so no second secret has to be
 * configured; rotating the JWT secret therefore makes stored TOTP secrets unreadable (users set
 * up OTP again), which the README states.
 */
export class SecretBox {
  readonly #key: Buffer

  constructor(masterSecret: Buffer, purpose: string) {
    this.#key = Buffer.from(hkdfSync('sha256', masterSecret, 'platform-core', purpose, 32))
  }

  seal(plaintext: string): string {
    const iv = randomBytes(12)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv)
    const sealed = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()])
    return ['v1', iv, cipher.getAuthTag(), sealed]
      .map((part) => (typeof part === 'string' ? part : part.toString('base64url')))
      .join('.')
  }

  open(box: string): string {
    const [version, iv, tag, sealed] = box.split('.')
    if (version !== 'v1' || !iv || !tag || sealed === undefined) throw new Error('unreadable sealed secret')
    const decipher = createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64url'))
    decipher.setAuthTag(Buffer.from(tag, 'base64url'))
    return Buffer.concat([decipher.update(Buffer.from(sealed, 'base64url')), decipher.final()]).toString(
      'utf8',
    )
  }
}
