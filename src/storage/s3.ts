import type { S3Client } from '@aws-sdk/client-s3'
import type { S3RequestPresigner } from '@aws-sdk/s3-request-presigner'
import { type Config, ConfigError } from '../config.ts'
import {
  type ObjectInfo,
  type ObjectStore,
  ObjectStoreError,
  type PresignedUpload,
  type StoredHeaders,
} from './port.ts'

// The S3 adapter of the object-store port, for any S3-compatible store (AWS, MinIO, the embedded
// server). Two clients: one for the calls the service makes itself (endpoint), one that only signs
// the addresses handed to browsers (public-endpoint), because the host is part of the signature.
//
// Pre-signing is on the hot path (every upload and download address), so it does not go through
// `getSignedUrl` each time: that runs the whole command pipeline (serializer, endpoint rule set, a
// new signer and a copy of the middleware stack) per address, about 290 µs of CPU against 50 µs
// for the signature itself. `getSignedUrl` is asked once, for where the bucket's objects live (host
// and path prefix, as the SDK's endpoint rules decide them: path style or virtual host); each
// address is then that location plus the key, signed by the SDK's S3RequestPresigner.
//
// The SDK (about 8 MB of memory with the presigner) is imported by the store's first call, once per
// process, not at start-up: the readiness check or the first file route pays for it.

export interface S3StoreOptions {
  endpoint: string
  /** The host written into pre-signed addresses, when browsers reach the store under another name. */
  publicEndpoint?: string | undefined
  region: string
  bucket: string
  /** Both or neither; neither uses the SDK's default chain (environment, instance role). */
  accessKeyId?: string | undefined
  secretAccessKey?: string | undefined
  pathStyle: boolean
  /** Per attempt of a call the service makes (HEAD, PUT, DELETE); default 10 s. */
  requestTimeoutMs?: number
}

/** Where the bucket's objects are addressed: an object's address is `${origin}${pathPrefix}/${key}`. */
interface ObjectLocation {
  protocol: string
  hostname: string
  port: number | undefined
  pathPrefix: string
}

/** The key of the one address `getSignedUrl` signs to learn the bucket's location (never fetched). */
const LOCATION_PROBE = 'platform-location-probe'

/** RFC 3986 encoding of one path segment or query part, as S3 and the SDK's signer expect it. */
function uriEscape(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  )
}

/** The object the readiness check reads, and writes when it is missing. */
const READINESS_PROBE = '.platform/readiness'
const CONNECTION_TIMEOUT_MS = 3_000
const REQUEST_TIMEOUT_MS = 10_000

type ClientModule = typeof import('@aws-sdk/client-s3')
type PresignerModule = typeof import('@aws-sdk/s3-request-presigner')

let sdkModules: Promise<[ClientModule, PresignerModule]> | undefined
const loadSdk = () => {
  sdkModules ??= Promise.all([import('@aws-sdk/client-s3'), import('@aws-sdk/s3-request-presigner')])
  return sdkModules
}

/** The SDK's objects of one store, made on its first call. */
interface Sdk {
  s3: ClientModule
  getSignedUrl: PresignerModule['getSignedUrl']
  client: S3Client
  signer: S3Client
  presigner: S3RequestPresigner
}

function s3Client(s3: ClientModule, endpoint: string, options: S3StoreOptions): S3Client {
  const { accessKeyId, secretAccessKey } = options
  return new s3.S3Client({
    endpoint,
    region: options.region,
    forcePathStyle: options.pathStyle,
    credentials: accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey } : undefined,
    // Only what the operation requires: a pre-signed PUT must not carry checksum parameters the
    // browser cannot produce, and stores other than AWS may not know the newer checksum headers.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: {
      connectionTimeout: CONNECTION_TIMEOUT_MS,
      requestTimeout: options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
    },
    maxAttempts: 3,
  })
}

function isNotFound(s3: ClientModule, error: unknown): boolean {
  return (
    error instanceof s3.S3ServiceException &&
    (error.name === 'NotFound' || error.name === 'NoSuchKey' || error.$metadata.httpStatusCode === 404)
  )
}

/** Deletes in flight at once in deleteMany. */
const DELETE_CONCURRENCY = 16

export class S3ObjectStore implements ObjectStore {
  readonly #options: S3StoreOptions
  readonly #bucket: string
  #sdk: Promise<Sdk> | undefined
  #location: Promise<ObjectLocation> | undefined

  constructor(options: S3StoreOptions) {
    this.#options = options
    this.#bucket = options.bucket
  }

  #loaded(): Promise<Sdk> {
    this.#sdk ??= loadSdk().then(([s3, presigning]) => {
      const options = this.#options
      const client = s3Client(s3, options.endpoint, options)
      const signer =
        options.publicEndpoint && options.publicEndpoint !== options.endpoint
          ? s3Client(s3, options.publicEndpoint, options)
          : client
      // The signer client's configuration: its credentials provider (refreshed as the SDK does),
      // region and hash; what `getSignedUrl` builds per call.
      const presigner = new presigning.S3RequestPresigner({ ...signer.config, signingName: 's3' })
      return { s3, getSignedUrl: presigning.getSignedUrl, client, signer, presigner }
    })
    return this.#sdk
  }

  async presignPut(
    key: string,
    contentType: string,
    expiresInSeconds: number,
    signingDate: Date,
  ): Promise<PresignedUpload> {
    // Content-Type is signed: a PUT with another type is refused by the store.
    const url = await this.#sign('PutObject', key, contentType, expiresInSeconds, signingDate)
    return { url, headers: { 'Content-Type': contentType } }
  }

  presignGet(key: string, expiresInSeconds: number, signingDate: Date): Promise<string> {
    return this.#sign('GetObject', key, undefined, expiresInSeconds, signingDate)
  }

  async head(key: string): Promise<ObjectInfo | null> {
    const { s3, client } = await this.#loaded()
    try {
      const output = await client.send(new s3.HeadObjectCommand({ Bucket: this.#bucket, Key: key }))
      return { size: output.ContentLength ?? 0, contentType: output.ContentType ?? null }
    } catch (error) {
      if (isNotFound(s3, error)) return null
      throw new ObjectStoreError('HeadObject failed', { cause: error })
    }
  }

  async delete(key: string): Promise<void> {
    const { s3, client } = await this.#loaded()
    try {
      await client.send(new s3.DeleteObjectCommand({ Bucket: this.#bucket, Key: key }))
    } catch (error) {
      if (isNotFound(s3, error)) return
      throw new ObjectStoreError('DeleteObject failed', { cause: error })
    }
  }

  /**
   * Single deletes, DELETE_CONCURRENCY at a time. Not DeleteObjects: S3-compatible stores sign and
   * check its `?delete` request in different ways (s3rver refuses the SDK's signature), while
   * DeleteObject works on every store.
   */
  async deleteMany(keys: readonly string[]): Promise<void> {
    let next = 0
    const worker = async () => {
      while (next < keys.length) {
        const key = keys[next++] as string
        await this.delete(key)
      }
    }
    await Promise.all(Array.from({ length: Math.min(DELETE_CONCURRENCY, keys.length) }, worker))
  }

  async put(key: string, bytes: Uint8Array, headers: StoredHeaders): Promise<void> {
    const { s3, client } = await this.#loaded()
    try {
      await client.send(
        new s3.PutObjectCommand({
          Bucket: this.#bucket,
          Key: key,
          Body: bytes,
          ContentType: headers.contentType,
          ContentDisposition: headers.contentDisposition,
          ContentLength: bytes.byteLength,
        }),
      )
    } catch (error) {
      throw new ObjectStoreError('PutObject failed', { cause: error })
    }
  }

  async copy(fromKey: string, toKey: string, headers: StoredHeaders): Promise<ObjectInfo | null> {
    const { s3, client } = await this.#loaded()
    try {
      await client.send(
        new s3.CopyObjectCommand({
          Bucket: this.#bucket,
          Key: toKey,
          CopySource: `${this.#bucket}/${fromKey.split('/').map(encodeURIComponent).join('/')}`,
          MetadataDirective: 'REPLACE',
          ContentType: headers.contentType,
          ContentDisposition: headers.contentDisposition,
        }),
      )
    } catch (error) {
      if (isNotFound(s3, error)) return null
      throw new ObjectStoreError('CopyObject failed', { cause: error })
    }
    return this.head(toKey)
  }

  async ready(): Promise<void> {
    // A store that refuses HEAD of a missing key (403 without ListBucket) still gets the PUT.
    if (await this.head(READINESS_PROBE).catch(() => null)) return
    try {
      await this.put(READINESS_PROBE, new TextEncoder().encode('ok'), {
        contentType: 'text/plain',
        contentDisposition: 'attachment',
      })
    } catch (error) {
      throw new ObjectStoreError(`the bucket ${this.#bucket} does not answer`, { cause: error })
    }
  }

  async close(): Promise<void> {
    // Never used (or the SDK failed to load): no client was made.
    const sdk = await this.#sdk?.catch(() => undefined)
    if (!sdk) return
    sdk.client.destroy()
    if (sdk.signer !== sdk.client) sdk.signer.destroy()
  }

  /** A pre-signed address of `key`; for a PUT, `contentType` is signed with it. */
  async #sign(
    operation: 'PutObject' | 'GetObject',
    key: string,
    contentType: string | undefined,
    expiresInSeconds: number,
    signingDate: Date,
  ): Promise<string> {
    try {
      const sdk = await this.#loaded()
      const location = await this.#objectLocation(sdk)
      const host = location.port === undefined ? location.hostname : `${location.hostname}:${location.port}`
      const signed = await sdk.presigner.presign(
        {
          method: operation === 'PutObject' ? 'PUT' : 'GET',
          protocol: location.protocol,
          hostname: location.hostname,
          port: location.port,
          path: `${location.pathPrefix}/${key.split('/').map(uriEscape).join('/')}`,
          headers: contentType === undefined ? { host } : { host, 'content-type': contentType },
          query: { 'x-id': operation },
        },
        {
          expiresIn: expiresInSeconds,
          signingDate,
          signableHeaders: new Set(contentType === undefined ? [] : ['content-type']),
        },
      )
      const query = Object.entries(signed.query ?? {})
        .map(([name, value]) => `${uriEscape(name)}=${uriEscape(String(value))}`)
        .join('&')
      return `${location.protocol}//${host}${signed.path}?${query}`
    } catch (error) {
      throw new ObjectStoreError(`signing ${operation} failed`, { cause: error })
    }
  }

  /** Asks the SDK once where the bucket's objects live for the signer's endpoint. */
  #objectLocation({ s3, getSignedUrl, signer }: Sdk): Promise<ObjectLocation> {
    this.#location ??= getSignedUrl(
      signer,
      new s3.GetObjectCommand({ Bucket: this.#bucket, Key: LOCATION_PROBE }),
      { expiresIn: 60 },
    ).then((address) => {
      const url = new URL(address)
      const end = url.pathname.lastIndexOf(`/${LOCATION_PROBE}`)
      if (end < 0) throw new Error(`unexpected pre-signed address layout: ${url.origin}${url.pathname}`)
      return {
        protocol: url.protocol,
        hostname: url.hostname,
        port: url.port === '' ? undefined : Number(url.port),
        pathPrefix: url.pathname.slice(0, end),
      }
    })
    // A failure (no credentials yet) is asked again next time.
    this.#location.catch(() => {
      this.#location = undefined
    })
    return this.#location
  }
}

/**
 * The S3 store at platform.storage.s3.endpoint. There is no silent fallback: without an endpoint
 * the service does not start. Outside production the launchers (npm run dev, npm start, the CLI
 * and the test harness) start the embedded server and set the endpoint (src/storage/embedded-s3.ts).
 */
export function createObjectStore(config: Config): ObjectStore {
  const s3 = config.storage.s3
  if (!s3.endpoint) {
    throw new ConfigError(
      'platform.storage.s3.endpoint',
      config.profile === 'production'
        ? 'is required under the production profile'
        : 'is not set (outside production the launcher starts the embedded S3-compatible server and sets it)',
    )
  }
  for (const [property, value] of [
    ['platform.storage.s3.endpoint', s3.endpoint],
    ['platform.storage.s3.public-endpoint', s3.publicEndpoint],
  ] as const) {
    if (value !== undefined && !/^https?:\/\/[^/]/i.test(value)) {
      throw new ConfigError(property, 'must be an http:// or https:// address')
    }
  }
  if (Boolean(s3.accessKeyId) !== Boolean(s3.secretAccessKey)) {
    throw new ConfigError(
      s3.accessKeyId ? 'platform.storage.s3.secret-access-key' : 'platform.storage.s3.access-key-id',
      'is required when the other half of the key pair is set',
    )
  }
  return new S3ObjectStore({
    endpoint: s3.endpoint,
    publicEndpoint: s3.publicEndpoint,
    region: s3.region,
    bucket: s3.bucket,
    accessKeyId: s3.accessKeyId,
    secretAccessKey: s3.secretAccessKey,
    pathStyle: s3.pathStyle,
  })
}
