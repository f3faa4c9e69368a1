import { randomBytes } from 'node:crypto'
import { mkdir, readFile, unlink, writeFile } from 'node:fs/promises'
import { createServer as createNetServer } from 'node:net'
import path from 'node:path'
import type S3rver from '@20minutes/s3rver'
import type { S3rverContext, S3rverMiddleware } from '@20minutes/s3rver'
import type { Config, ConfigSource } from '../config.ts'

// The embedded S3-compatible server for development and tests: @20minutes/s3rver on
// 127.0.0.1, files under a directory, every request signed with this server's own key pair (an
// unsigned request, s3rver's well-known S3RVER key, another Content-Type than the signed one, a
// changed signature or a past expiry are refused as S3 would refuse them). The service never
// creates the bucket (it must exist beforehand): the launcher that starts this server creates it,
// with a CORS rule so a browser page on the given origins can PUT and GET directly.

export interface S3Credentials {
  accessKeyId: string
  secretAccessKey: string
}

/** A key pair of its own for one embedded server (s3rver's built-in S3RVER pair is refused). */
export function newEmbeddedCredentials(): S3Credentials {
  return {
    accessKeyId: `EMBEDDED${randomBytes(6).toString('hex').toUpperCase()}`,
    secretAccessKey: randomBytes(24).toString('base64url'),
  }
}

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
  /** The key pair requests must be signed with; a new one when not given. */
  credentials?: S3Credentials
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

// s3rver verifies signatures itself (SigV4 in a header or a pre-signed query, with expiry and clock
// skew; the storage contract suite runs the S3 adapter against a stock s3rver to prove it), but it
// also serves anonymous requests and knows a public key pair (S3RVER/S3RVER). A real store does
// neither: this middleware, in front of s3rver's own, refuses a request that is not signed with
// this server's own key pair, and s3rver then checks the signature.

function headerValue(context: S3rverContext, name: string): string | undefined {
  const value = context.headers[name]
  return Array.isArray(value) ? value.join(',') : value
}

/** The access key id a request is signed with (V4 header or query, V2 header); null when unsigned. */
function accessKeyOf(context: S3rverContext): string | null {
  const credential = new URLSearchParams(context.querystring).get('X-Amz-Credential')
  if (credential) return credential.split('/')[0] ?? ''
  const authorization = headerValue(context, 'authorization') ?? ''
  const v4 = /^AWS4-HMAC-SHA256 .*Credential=([^/,\s]*)/.exec(authorization)
  if (v4) return v4[1] ?? ''
  const v2 = /^AWS ([^:]*):/.exec(authorization)
  if (v2) return v2[1] ?? ''
  return new URLSearchParams(context.querystring).get('AWSAccessKeyId')
}

function refuse(context: S3rverContext, code: string, message: string): void {
  context.status = 403
  context.type = 'application/xml'
  context.body = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message></Error>`
}

/** Every request but a CORS preflight must be signed with `credentials`, as a real store requires. */
function signatureCheck(credentials: S3Credentials): S3rverMiddleware {
  return async (context, next) => {
    if (context.method === 'OPTIONS') return next()
    const accessKeyId = accessKeyOf(context)
    if (accessKeyId === null) {
      refuse(context, 'AccessDenied', 'Access Denied: anonymous requests are not allowed')
      return
    }
    if (accessKeyId !== credentials.accessKeyId) {
      refuse(
        context,
        'InvalidAccessKeyId',
        'The AWS Access Key Id you provided does not exist in our records.',
      )
      return
    }
    return next()
  }
}

/**
 * s3rver's filesystem store removes the folders a DeleteObject leaves empty: it checks a folder is
 * empty, then, after an await, removes it recursively, taking along (or failing with 500) an
 * object a concurrent PutObject wrote there in between, with the PUT already answered 200. Two
 * attachments of one purchase request uploaded at once lost one (found by the kill -9 test,
 * test/reliability/embedded-store-concurrent-uploads.test.ts). S3 has no folders: here a delete
 * removes the object's files and leaves folders alone.
 */
function keepFolders(server: S3rver): void {
  const { store } = server
  store.deleteObject = async (bucket, key) => {
    await Promise.all(
      ['object', 'object.md5', 'metadata.json'].map((resource) =>
        unlink(store.getResourcePath(bucket, key, resource)).catch((error: NodeJS.ErrnoException) => {
          if (error.code !== 'ENOENT') throw error
        }),
      ),
    )
  }
}

export class EmbeddedS3 {
  readonly endpoint: string
  readonly bucket: string
  readonly region: string
  readonly directory: string
  readonly credentials: S3Credentials
  readonly #server: S3rver | null

  private constructor(
    server: S3rver | null,
    endpoint: string,
    options: EmbeddedS3Options,
    credentials: S3Credentials,
  ) {
    this.#server = server
    this.endpoint = endpoint
    this.credentials = credentials
    this.bucket = options.bucket
    this.region = options.region ?? 'us-east-1'
    this.directory = options.directory
  }

  /** Starts the server and creates the bucket (replacing its CORS rule when it already exists). */
  static async start(options: EmbeddedS3Options): Promise<EmbeddedS3> {
    await mkdir(options.directory, { recursive: true })
    const origins = options.allowedOrigins ?? []
    const host = options.host ?? '127.0.0.1'
    // Loaded when started: a deployment on real S3 never pays for s3rver's memory.
    const [{ default: S3rverServer }, { default: AWSAccount }] = await Promise.all([
      import('@20minutes/s3rver'),
      import('@20minutes/s3rver/lib/models/account.js'),
    ])
    const server = new S3rverServer({
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
    const credentials = options.credentials ?? newEmbeddedCredentials()
    // s3rver checks the key exists after the signature check above has accepted the request.
    AWSAccount.DUMMY_ACCOUNT.createKeyPair(credentials.accessKeyId, credentials.secretAccessKey)
    server.middleware.unshift(signatureCheck(credentials))
    keepFolders(server)
    // s3rver reports a busy port as an 'error' event nobody listens to, which would end the process:
    // a port of our choice is tried first, so the caller gets EADDRINUSE as a rejection.
    if (options.port) await ensurePortFree(host, options.port)
    const address = await server.run()
    return new EmbeddedS3(server, `http://${host}:${address.port}`, options, credentials)
  }

  /** The server another process of this data directory runs, at `endpoint`. */
  static elsewhere(endpoint: string, options: EmbeddedS3Options, credentials: S3Credentials): EmbeddedS3 {
    return new EmbeddedS3(null, endpoint, options, credentials)
  }

  /** The configuration entries that point the service at this server. */
  configSource(): ConfigSource {
    return {
      'platform.storage.s3.endpoint': this.endpoint,
      'platform.storage.s3.bucket': this.bucket,
      'platform.storage.s3.region': this.region,
      'platform.storage.s3.access-key-id': this.credentials.accessKeyId,
      'platform.storage.s3.secret-access-key': this.credentials.secretAccessKey,
      'platform.storage.s3.path-style': 'true',
    }
  }

  async close(): Promise<void> {
    await this.#server?.close()
  }
}

function originOf(url: string): string {
  try {
    return new URL(url).origin
  } catch {
    return url
  }
}

/** What the launchers keep beside the objects, so addresses signed before a restart stay valid. */
interface EmbeddedState extends S3Credentials {
  port: number
}

async function readState(file: string): Promise<EmbeddedState | null> {
  try {
    const state = JSON.parse(await readFile(file, 'utf8')) as Partial<EmbeddedState>
    return typeof state.port === 'number' && state.accessKeyId && state.secretAccessKey
      ? (state as EmbeddedState)
      : null
  } catch {
    return null
  }
}

/** Whether the embedded server of this data directory answers at `endpoint` (it refuses unsigned requests so). */
async function answersAsEmbedded(endpoint: string): Promise<boolean> {
  try {
    const res = await fetch(`${endpoint}/`, { signal: AbortSignal.timeout(2_000) })
    return res.status === 403 && (await res.text()).includes('anonymous requests are not allowed')
  } catch {
    return false
  }
}

/**
 * For the launchers: with no platform.storage.s3.endpoint outside the production profile, starts
 * the embedded server with its objects under `<dataDir>/s3` and the configured bucket, open to the
 * service's web origins; null when an endpoint is set or under production (where the missing
 * endpoint is a startup error of the storage plugin). Its port and key pair are kept in
 * `<dataDir>/s3.json` (mode 0600) and reused, so addresses signed before a restart still work; when
 * another process of the same data directory already serves it there (the CLI beside
 * `npm run dev`), that server is used.
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
  const stateFile = path.join(config.dataDir, 's3.json')
  const saved = await readState(stateFile)
  const credentials = saved ?? newEmbeddedCredentials()
  const serverOptions: EmbeddedS3Options = {
    directory: path.join(config.dataDir, 's3'),
    bucket: config.storage.s3.bucket,
    region: config.storage.s3.region,
    allowedOrigins: origins,
    credentials: { accessKeyId: credentials.accessKeyId, secretAccessKey: credentials.secretAccessKey },
  }
  const port = options.port ?? saved?.port ?? 0
  let server: EmbeddedS3
  try {
    server = await EmbeddedS3.start({ ...serverOptions, port })
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw error
    const endpoint = `http://127.0.0.1:${port}`
    if (await answersAsEmbedded(endpoint)) return EmbeddedS3.elsewhere(endpoint, serverOptions, credentials)
    // Something else has the port now: a new one (addresses signed for the old one are lost).
    server = await EmbeddedS3.start({ ...serverOptions, port: 0 })
  }
  const state: EmbeddedState = { ...credentials, port: Number(new URL(server.endpoint).port) }
  await mkdir(config.dataDir, { recursive: true })
  await writeFile(stateFile, `${JSON.stringify(state)}\n`, { mode: 0o600 })
  return server
}

/** Rejects with EADDRINUSE (or another listen error) unless `host:port` can be bound now. */
function ensurePortFree(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createNetServer()
    probe.once('error', reject)
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()))
  })
}
