// Types for the parts of @20minutes/s3rver (an S3-compatible server, plain JavaScript) we use.
declare module '@20minutes/s3rver' {
  import type { Server } from 'node:http'
  import type { AddressInfo } from 'node:net'

  export interface S3rverBucket {
    name: string
    /** CORSConfiguration or WebsiteConfiguration XML documents. */
    configs?: (string | Buffer)[]
  }

  export interface S3rverOptions {
    address?: string
    port?: number
    silent?: boolean
    directory?: string
    resetOnClose?: boolean
    allowMismatchedSignatures?: boolean
    vhostBuckets?: boolean
    serviceEndpoint?: string
    configureBuckets?: S3rverBucket[]
  }

  /** The parts of a Koa context the embedded server's own middleware reads and writes. */
  export interface S3rverContext {
    method: string
    /** The request path as sent, still percent-encoded. */
    path: string
    /** The query string as sent, without `?`. */
    querystring: string
    headers: Record<string, string | string[] | undefined>
    state: Record<string, unknown>
    status: number
    type: string
    body: unknown
  }

  export type S3rverMiddleware = (context: S3rverContext, next: () => Promise<void>) => Promise<void>

  /** A Koa application: `middleware` runs in order, and may be added to before `run()`. */
  export default class S3rver {
    constructor(options?: S3rverOptions)
    middleware: S3rverMiddleware[]
    /** The filesystem store (lib/stores/filesystem.js). */
    store: {
      getResourcePath(bucket: string, key: string, resource: string): string
      deleteObject(bucket: string, key: string): Promise<void>
    }
    run(): Promise<AddressInfo>
    close(): Promise<void>
    httpServer?: Server
  }
}

declare module '@20minutes/s3rver/lib/models/account.js' {
  /** s3rver's account registry: a key pair created here is one s3rver accepts. */
  const AWSAccount: {
    DUMMY_ACCOUNT: { createKeyPair(accessKeyId: string, secretAccessKey: string): void }
  }
  export default AWSAccount
}
