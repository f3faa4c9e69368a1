import { createHmac, randomBytes } from 'node:crypto'

// Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`,
// one per secret in use, space-separated; the key is the secret's bytes after `whsec_`.

const PREFIX = 'whsec_'

/** A new signing secret: `whsec_` and 32 random bytes in base64 (shown to its owner once). */
export function generateSecret(): string {
  return `${PREFIX}${randomBytes(32).toString('base64')}`
}

function secretKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64')
}

/** The `webhook-signature` header of one delivery attempt, signed with each secret given. */
export function signatureHeader(
  secrets: readonly string[],
  message: { id: string; timestamp: number; body: string },
): string {
  const content = `${message.id}.${message.timestamp}.${message.body}`
  return secrets
    .map((secret) => `v1,${createHmac('sha256', secretKey(secret)).update(content).digest('base64')}`)
    .join(' ')
}
