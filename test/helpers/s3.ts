import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import S3rver from '@20minutes/s3rver'
import type { ConfigSource } from '../../src/config.ts'
import { corsConfiguration, EmbeddedS3, type S3Credentials } from '../../src/storage/embedded-s3.ts'
import { S3ObjectStore } from '../../src/storage/s3.ts'

// S3-compatible servers on 127.0.0.1 and an ephemeral port, with their objects in a temporary
// directory removed on close; the bucket is created here, as the dev launcher creates it (the
// service never does):
// - startTestS3: the project's embedded server (its own key pair, every request signed);
// - startStockS3rver: @20minutes/s3rver as it comes, with its own signature checking and its
//   built-in S3RVER key pair: a store the project did not write.

export interface TestS3 {
  endpoint: string
  bucket: string
  region: string
  credentials: S3Credentials
  /** Configuration entries that point an app at this server. */
  config: ConfigSource
  /** An S3 adapter on this server that the caller closes. */
  store(): S3ObjectStore
  close(): Promise<void>
}

function testS3(
  endpoint: string,
  bucket: string,
  credentials: S3Credentials,
  close: () => Promise<void>,
): TestS3 {
  const region = 'us-east-1'
  return {
    endpoint,
    bucket,
    region,
    credentials,
    config: {
      'platform.storage.s3.endpoint': endpoint,
      'platform.storage.s3.bucket': bucket,
      'platform.storage.s3.region': region,
      'platform.storage.s3.access-key-id': credentials.accessKeyId,
      'platform.storage.s3.secret-access-key': credentials.secretAccessKey,
      'platform.storage.s3.path-style': 'true',
    },
    store: () => new S3ObjectStore({ endpoint, region, bucket, ...credentials, pathStyle: true }),
    close,
  }
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
  return testS3(server.endpoint, bucket, server.credentials, async () => {
    await server.close()
    await rm(directory, { recursive: true, force: true })
  })
}

export async function startStockS3rver(
  options: { allowedOrigins?: string[]; bucket?: string } = {},
): Promise<TestS3> {
  const directory = await mkdtemp(path.join(tmpdir(), 'platform-s3rver-'))
  const bucket = options.bucket ?? 'platform-test'
  const origins = options.allowedOrigins ?? ['http://app.example.test']
  const server = new S3rver({
    address: '127.0.0.1',
    port: 0,
    directory,
    silent: true,
    allowMismatchedSignatures: false,
    vhostBuckets: false,
    configureBuckets: [{ name: bucket, configs: [corsConfiguration(origins)] }],
  })
  const address = await server.run()
  return testS3(
    `http://127.0.0.1:${address.port}`,
    bucket,
    { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    async () => {
      await server.close()
      await rm(directory, { recursive: true, force: true })
    },
  )
}
