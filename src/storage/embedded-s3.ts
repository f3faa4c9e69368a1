import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import S3rver, { type S3rverContext, type S3rverMiddleware } from '@20minutes/s3rver'
import type { Config, ConfigSource } from '../config.ts'

// The embedded S3-compatible server (decisions 3) for development and tests: @20minutes/s3rver on
// 127.0.0.1, files under a directory, signatures verified (a pre-signed address with another
// Content-Type, a changed signature or a past expiry is refused as S3 would). The service never
// creates the bucket (spec 4.3): the launcher that starts this server creates it, with a CORS rule
// so a browser page on the given origins can PUT and GET directly.

/** s3rver's built-in account; it accepts no other key pair. */
export const EMBEDDED_S3_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } as const

export interface EmbeddedS3Options {
  /** Where objects are kept; created when missing. */
  directory: string
  bucket: string
  /** Origins (scheme://host:port) allowed to PUT and GET from a browser; none: no CORS rule. */
  allowedOrigins?: readonly string[]
  region?: string
  host?: string
  /** 0 (default): any free port. */
  port?: number
}

const escapeXml = (value: string) =>
  value.replace(/[<>&'"]/g, (c) => `&${{ '<': 'lt', '>': 'gt', '&': 'amp', "'": 'apos', '"': 'quot' }[c]};`)

/** A bucket CORS rule for direct browser uploads and downloads from the given origins. */
export function corsConfiguration(origins: readonly string[]): string {
  return [
    '<CORSConfiguration><CORSRule>',
    ...origins.map((origin) => `<AllowedOrigin>${escapeXml(origin)}</AllowedOrigin>`),
    '<AllowedMethod>PUT</AllowedMethod><AllowedMethod>GET</AllowedMethod><AllowedMethod>HEAD</AllowedMethod>',
    '<AllowedHeader>*</AllowedHeader><ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds>',
    '</CORSRule></CORSConfiguration>',
  ].join('')
}

// s3rver computes the canonical request of AWS Signature Version 4 slightly differently from S3:
// query values are encoded with encodeURIComponent, which leaves `'()*!` as they are (a pre-signed
// GET carrying `filename*=UTF-8''…` in response-content-disposition never matches), and a bucket
// addressed as `/bucket/` is signed as `/bucket`. This middleware, placed in front of s3rver's own,
// verifies SigV4 requests as S3 does; a request it accepts is marked authenticated, which s3rver
// honours, and s3rver's other checks (expiry, clock skew, the account) still apply after it.

const rfc3986 = (value: string) =>
  encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

const sha256Hex = (value: string) => createHash('sha256').update(value, 'utf8').digest('hex')
const hmac = (key: string | Buffer, value: string) => createHmac('sha256', key).update(value, 'utf8').digest()

function queryPairs(querystring: string): [string, string][] {
  return querystring
    .split('&')
    .filter((pair) => pair !== '')
    .map((pair) => {
      const equals = pair.indexOf('=')
      const [name, value] = equals < 0 ? [pair, ''] : [pair.slice(0, equals), pair.slice(equals + 1)]
      return [decodeURIComponent(name), decodeURIComponent(value)]
    })
}

interface SignedRequest {
  accessKeyId: string
  scope: string[]
  signedHeaders: string[]
  signature: string
  date: string
  payloadHash: string
  /** Whether the signature travels in the query (a pre-signed address) rather than a header. */
  presigned: boolean
}

function headerValue(context: S3rverContext, name: string): string | undefined {
  const value = context.headers[name]
  return Array.isArray(value) ? value.join(',') : value
}

function signedRequestOf(context: S3rverContext, query: Map<string, string>): SignedRequest | null {
  if (query.get('X-Amz-Algorithm') === 'AWS4-HMAC-SHA256') {
    const [accessKeyId = '', ...scope] = (query.get('X-Amz-Credential') ?? '').split('/')
    return {
      accessKeyId,
      scope,
      signedHeaders: (query.get('X-Amz-SignedHeaders') ?? '').split(';'),
      signature: query.get('X-Amz-Signature') ?? '',
      date: query.get('X-Amz-Date') ?? '',
      payloadHash: query.get('X-Amz-Content-Sha256') ?? 'UNSIGNED-PAYLOAD',
      presigned: true,
    }
  }
  const authorization = headerValue(context, 'authorization') ?? ''
  if (!authorization.startsWith('AWS4-HMAC-SHA256 ')) return null
  const parts = new Map(
    authorization
      .slice('AWS4-HMAC-SHA256 '.length)
      .split(',')
      .map((part) => {
        const trimmed = part.trim()
        const equals = trimmed.indexOf('=')
        return [trimmed.slice(0, equals), trimmed.slice(equals + 1)] as const
      }),
  )
  const [accessKeyId = '', ...scope] = (parts.get('Credential') ?? '').split('/')
  return {
    accessKeyId,
    scope,
    signedHeaders: (parts.get('SignedHeaders') ?? '').split(';'),
    signature: parts.get('Signature') ?? '',
    date: headerValue(context, 'x-amz-date') ?? '',
    payloadHash: headerValue(context, 'x-amz-content-sha256') ?? '',
    presigned: false,
  }
}

function expectedSignature(context: S3rverContext, request: SignedRequest, secretAccessKey: string): string {
  const query = queryPairs(context.querystring)
    .filter(([name]) => !(request.presigned && name === 'X-Amz-Signature'))
    .map(([name, value]) => [rfc3986(name), rfc3986(value)] as const)
    .sort(([a, x], [b, y]) => (a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0))
    .map(([name, value]) => `${name}=${value}`)
    .join('&')
  const headers = request.signedHeaders
    .map((name) => `${name}:${(headerValue(context, name) ?? '').trim().replace(/\s+/g, ' ')}\n`)
    .join('')
  const canonicalRequest = [
    context.method,
    context.path,
    query,
    headers,
    request.signedHeaders.join(';'),
    request.payloadHash,
  ].join('\n')
  const stringToSign = [
    'AWS4-HMAC-SHA256',
    request.date,
    request.scope.join('/'),
    sha256Hex(canonicalRequest),
  ].join('\n')
  const [day = '', region = '', service = '', terminator = ''] = request.scope
  const signingKey = hmac(hmac(hmac(hmac(`AWS4${secretAccessKey}`, day), region), service), terminator)
  return hmac(signingKey, stringToSign).toString('hex')
}

function signatureDoesNotMatch(context: S3rverContext): void {
  context.status = 403
  context.type = 'application/xml'
  context.body = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not',
    ' match the signature you provided. Check your key and signing method.</Message></Error>',
  ].join('')
}

const verifySignatureV4: S3rverMiddleware = async (context, next) => {
  if (context.method === 'OPTIONS') return next()
  let request: SignedRequest | null
  let expected: Buffer
  try {
    request = signedRequestOf(context, new Map(queryPairs(context.querystring)))
    // Anonymous, SigV2 and unknown keys are left to s3rver, which refuses what it must.
    if (!request || request.accessKeyId !== EMBEDDED_S3_CREDENTIALS.accessKeyId) return next()
    expected = Buffer.from(expectedSignature(context, request, EMBEDDED_S3_CREDENTIALS.secretAccessKey))
  } catch {
    // A query string that does not decode cannot carry a valid signature.
    signatureDoesNotMatch(context)
    return
  }
  const provided = Buffer.from(request.signature)
  if (expected.length !== provided.length || !timingSafeEqual(expected, provided)) {
    signatureDoesNotMatch(context)
    return
  }
  context.state.account = { id: 'embedded', displayName: 'S3rver' }
  return next()
}

export class EmbeddedS3 {
  readonly endpoint: string
  readonly bucket: string
  readonly region: string
  readonly directory: string
  readonly #server: S3rver

  private constructor(server: S3rver, endpoint: string, options: EmbeddedS3Options) {
    this.#server = server
    this.endpoint = endpoint
    this.bucket = options.bucket
    this.region = options.region ?? 'us-east-1'
    this.directory = options.directory
  }

  /** Starts the server and creates the bucket (replacing its CORS rule when it already exists). */
  static async start(options: EmbeddedS3Options): Promise<EmbeddedS3> {
    await mkdir(options.directory, { recursive: true })
    const origins = options.allowedOrigins ?? []
    const host = options.host ?? '127.0.0.1'
    const server = new S3rver({
      address: host,
      port: options.port ?? 0,
      directory: options.directory,
      silent: true,
      // Path-style only: a host name is never taken for a bucket name.
      vhostBuckets: false,
      allowMismatchedSignatures: false,
      configureBuckets: [
        { name: options.bucket, configs: origins.length > 0 ? [corsConfiguration(origins)] : [] },
      ],
    })
    server.middleware.unshift(verifySignatureV4)
    const address = await server.run()
    return new EmbeddedS3(server, `http://${host}:${address.port}`, options)
  }

  /** The configuration entries that point the service at this server. */
  configSource(): ConfigSource {
    return {
      'platform.storage.s3.endpoint': this.endpoint,
      'platform.storage.s3.bucket': this.bucket,
      'platform.storage.s3.region': this.region,
      'platform.storage.s3.access-key-id': EMBEDDED_S3_CREDENTIALS.accessKeyId,
      'platform.storage.s3.secret-access-key': EMBEDDED_S3_CREDENTIALS.secretAccessKey,
      'platform.storage.s3.path-style': 'true',
    }
  }

  close(): Promise<void> {
    return this.#server.close()
  }
}

function originOf(url: string): string {
  try {
    return new URL(url).origin
  } catch {
    return url
  }
}

/**
 * For the launchers: with no platform.storage.s3.endpoint outside the production profile, starts
 * the embedded server with its objects under `<dataDir>/s3` and the configured bucket, open to the
 * service's web origins; null when an endpoint is set or under production (where the missing
 * endpoint is a startup error of the storage plugin).
 */
export async function startEmbeddedStorage(
  config: Config,
  options: { port?: number } = {},
): Promise<EmbeddedS3 | null> {
  if (config.storage.s3.endpoint || config.profile === 'production') return null
  const origins = [
    ...new Set(
      [...config.web.cors.allowedOrigins, config.web.frontendUrl, config.web.publicUrl].map(originOf),
    ),
  ]
  return EmbeddedS3.start({
    directory: path.join(config.dataDir, 's3'),
    bucket: config.storage.s3.bucket,
    region: config.storage.s3.region,
    allowedOrigins: origins,
    ...(options.port === undefined ? {} : { port: options.port }),
  })
}
