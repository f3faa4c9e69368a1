import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from 'node:crypto'

/** A 256-bit key for one purpose, derived with HKDF from a deployment secret. */
export function deriveKey(master: Buffer, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', master, 'platform-core', purpose, 32))
}

/**
 * Authenticated encryption (AES-256-GCM) for secrets kept at rest: TOTP secrets, token links in the
 * mail outbox. Keys are derived with HKDF from the deployment's JWT secrets under a purpose label,
 * so no second secret has to be configured. Rotation-ready like the JWT keys: the current secret
 * seals and names its key in the box; the previous secrets (`platform.auth.jwt.previous-secrets`)
 * still open what they sealed.
 */
export class SecretBox {
  readonly #keys: Map<string, Buffer>
  readonly #current: [string, Buffer]

  /** `masterSecrets`: the current secret first, then the previous ones. */
  constructor(masterSecrets: Buffer | readonly Buffer[], purpose: string) {
    const masters = Array.isArray(masterSecrets) ? masterSecrets : [masterSecrets as Buffer]
    const derived = masters.map((master): [string, Buffer] => {
      const key = deriveKey(master, purpose)
      return [createHash('sha256').update(key).digest('base64url').slice(0, 8), key]
    })
    if (!derived[0]) throw new Error('a secret box needs a key')
    this.#current = derived[0]
    this.#keys = new Map(derived)
  }

  seal(plaintext: string): string {
    const [kid, key] = this.#current
    const iv = randomBytes(12)
    const cipher = createCipheriv('aes-256-gcm', key, iv)
    const sealed = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()])
    return ['v2', kid, ...[iv, cipher.getAuthTag(), sealed].map((part) => part.toString('base64url'))].join(
      '.',
    )
  }

  open(box: string): string {
    const parts = box.split('.')
    // v1 boxes (before rotation support) carry no key id: they were sealed with the current key.
    const [kid, iv, tag, sealed] = parts[0] === 'v2' ? parts.slice(1) : [this.#current[0], ...parts.slice(1)]
    const key = kid === undefined ? undefined : this.#keys.get(kid)
    if ((parts[0] !== 'v1' && parts[0] !== 'v2') || !key || !iv || !tag || sealed === undefined) {
      throw new Error('unreadable sealed secret')
    }
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'))
    decipher.setAuthTag(Buffer.from(tag, 'base64url'))
    return Buffer.concat([decipher.update(Buffer.from(sealed, 'base64url')), decipher.final()]).toString(
      'utf8',
    )
  }
}
