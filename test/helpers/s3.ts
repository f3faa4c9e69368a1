import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import type { ConfigSource } from '../../src/config.ts'
import { EMBEDDED_S3_CREDENTIALS, EmbeddedS3 } from '../../src/storage/embedded-s3.ts'
import { S3ObjectStore } from '../../src/storage/s3.ts'

// The embedded S3-compatible server (signatures verified) on 127.0.0.1 and an ephemeral port, with
// its objects in a temporary directory removed on close. The bucket is created here, as the dev
// launcher creates it: the service never does.

export interface TestS3 {
  server: EmbeddedS3
  endpoint: string
  bucket: string
  /** Configuration entries that point an app at this server. */
  config: ConfigSource
  /** An S3 adapter on this server that the caller closes. */
  store(): S3ObjectStore
  close(): Promise<void>
}

export async function startTestS3(
  options: { allowedOrigins?: string[]; bucket?: string } = {},
): Promise<TestS3> {
  const directory = await mkdtemp(path.join(tmpdir(), 'platform-s3-'))
  const bucket = options.bucket ?? 'platform-test'
  const server = await EmbeddedS3.start({
    directory,
    bucket,
    allowedOrigins: options.allowedOrigins ?? ['http://app.example.test'],
  })
  return {
    server,
    endpoint: server.endpoint,
    bucket,
    config: server.configSource(),
    store: () =>
      new S3ObjectStore({
        endpoint: server.endpoint,
        region: server.region,
        bucket,
        ...EMBEDDED_S3_CREDENTIALS,
        pathStyle: true,
      }),
    close: async () => {
      await server.close()
      await rm(directory, { recursive: true, force: true })
    },
  }
}
