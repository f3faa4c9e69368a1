import {
  createHash,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
} from 'node:crypto'
import { isoCBOR } from '@simplewebauthn/server/helpers'

// A software authenticator for tests that speak to the passkey endpoints without a browser: an
// ES256 key per credential, attestation `none`, the authenticator data and client data a browser
// would send (CBOR from @simplewebauthn/server's own encoder). It can be told to misbehave: leave
// user verification out, report a counter, answer for another origin. test/browser.passkeys.test.ts
// drives Chromium's virtual authenticator instead.

const sha256 = (data: Uint8Array | string) => createHash('sha256').update(data).digest()
const b64url = (data: Uint8Array) => Buffer.from(data).toString('base64url')

const FLAG_UP = 0x01
const FLAG_UV = 0x04
const FLAG_BE = 0x08
const FLAG_BS = 0x10
const FLAG_AT = 0x40

export interface SoftCredential {
  id: Buffer
  key: KeyObject
  userHandle: string
  counter: number
}

export interface CeremonyOptions {
  /** Default true: the authenticator verified its user. */
  userVerified?: boolean
  /** The signature counter to report (default: the credential's, plus one when `counting`). */
  counter?: number
  origin?: string
  rpId?: string
  /** Register this credential again (its id and key) instead of a new one. */
  reuse?: SoftCredential
}

export class SoftAuthenticator {
  readonly credentials: SoftCredential[] = []

  readonly origin: string
  readonly rpId: string
  /** Synced passkeys report backup eligibility and a counter that stays 0. */
  readonly synced: boolean

  constructor(origin: string, rpId: string, synced = true) {
    this.origin = origin
    this.rpId = rpId
    this.synced = synced
  }

  /** navigator.credentials.create for the given creation options (JSON as the service sends them). */
  create(options: { challenge: string; user: { id: string } }, ceremony: CeremonyOptions = {}) {
    const { privateKey, publicKey } = ceremony.reuse
      ? { privateKey: ceremony.reuse.key, publicKey: createPublicKey(ceremony.reuse.key) }
      : generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const jwk = publicKey.export({ format: 'jwk' })
    const cose = new Map<number, number | Uint8Array>([
      [1, 2],
      [3, -7],
      [-1, 1],
      [-2, Buffer.from(jwk.x as string, 'base64url')],
      [-3, Buffer.from(jwk.y as string, 'base64url')],
    ])
    const credential: SoftCredential = {
      id: ceremony.reuse?.id ?? randomBytes(16),
      key: privateKey,
      userHandle: options.user.id,
      counter: ceremony.counter ?? 0,
    }
    const idLength = Buffer.alloc(2)
    idLength.writeUInt16BE(credential.id.length)
    const authData = Buffer.concat([
      this.#authDataHead(ceremony, credential.counter, FLAG_AT),
      Buffer.alloc(16),
      idLength,
      credential.id,
      Buffer.from(isoCBOR.encode(cose as never)),
    ])
    const attestationObject = isoCBOR.encode(
      new Map<string, unknown>([
        ['fmt', 'none'],
        ['attStmt', new Map()],
        ['authData', new Uint8Array(authData)],
      ]) as never,
    )
    if (!ceremony.reuse) this.credentials.push(credential)
    return {
      id: b64url(credential.id),
      rawId: b64url(credential.id),
      type: 'public-key' as const,
      response: {
        clientDataJSON: this.#clientData('webauthn.create', options.challenge, ceremony),
        attestationObject: b64url(attestationObject),
        transports: ['internal'],
      },
      clientExtensionResults: {},
      authenticatorAttachment: 'platform' as const,
    }
  }

  /** navigator.credentials.get: an assertion by `credential` (default the first) for the options. */
  get(options: { challenge: string }, ceremony: CeremonyOptions = {}, credential = this.credentials[0]) {
    if (!credential) throw new Error('the authenticator holds no credential')
    const counter = ceremony.counter ?? (this.synced ? 0 : credential.counter + 1)
    credential.counter = counter
    const authData = this.#authDataHead(ceremony, counter, 0)
    const clientDataJSON = this.#clientData('webauthn.get', options.challenge, ceremony)
    const signature = sign(
      'sha256',
      Buffer.concat([authData, sha256(Buffer.from(clientDataJSON, 'base64url'))]),
      credential.key,
    )
    return {
      id: b64url(credential.id),
      rawId: b64url(credential.id),
      type: 'public-key' as const,
      response: {
        clientDataJSON,
        authenticatorData: b64url(authData),
        signature: b64url(signature),
        userHandle: credential.userHandle,
      },
      clientExtensionResults: {},
      authenticatorAttachment: 'platform' as const,
    }
  }

  #authDataHead(ceremony: CeremonyOptions, counter: number, extra: number): Buffer {
    const uv = ceremony.userVerified ?? true
    const flags = FLAG_UP | (uv ? FLAG_UV : 0) | (this.synced ? FLAG_BE | FLAG_BS : 0) | extra
    const count = Buffer.alloc(4)
    count.writeUInt32BE(counter)
    return Buffer.concat([sha256(ceremony.rpId ?? this.rpId), Buffer.from([flags]), count])
  }

  #clientData(type: string, challenge: string, ceremony: CeremonyOptions): string {
    const data = { type, challenge, origin: ceremony.origin ?? this.origin, crossOrigin: false }
    return Buffer.from(JSON.stringify(data)).toString('base64url')
  }
}
