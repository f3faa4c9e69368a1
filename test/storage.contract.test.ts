import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3'
import { getSignedUrl } from '@aws-sdk/s3-request-presigner'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../src/config.ts'
import { startEmbeddedStorage } from '../src/storage/embedded-s3.ts'
import { contentDisposition } from '../src/storage/file-metadata.ts'
import type { ObjectStore } from '../src/storage/port.ts'
import { createObjectStore, S3ObjectStore } from '../src/storage/s3.ts'
import { configErrorOf, testConfig, testSecret } from './helpers/app.ts'
import { startStockS3rver, startTestS3, type TestS3 } from './helpers/s3.ts'
import { closedPort } from './helpers/smtp.ts'

// The object-store port's contract, through the S3 adapter, run against two S3-compatible
// servers: the project's embedded one, and a stock @20minutes/s3rver with its own signature
// checking (a store the project did not write, which canonicalises signed requests its own way):
// pre-signed PUT and GET (a non-ASCII file name included), server-side put, copy, head and delete;
// pre-signed PUTs without checksum parameters; the readiness check. Then what only the embedded
// server does (it refuses unsigned requests), addresses for the public endpoint, and the configuration.

const key = (name: string) => `contract/${name}-${Math.random().toString(36).slice(2)}`
const GERMAN = 'Angebot für Müller – 2026 (final).pdf'

describe.each([
  ['the embedded server', startTestS3],
  ['a stock s3rver with its own signature checking', startStockS3rver],
])('the ObjectStore contract (S3 adapter, %s)', (_name, start) => {
  let server: TestS3
  let store: ObjectStore

  beforeAll(async () => {
    server = await start({ allowedOrigins: ['http://app.example.test'] })
    store = server.store()
  })

  afterAll(async () => {
    await store?.close()
    await server?.close()
  })

  it('round-trips: pre-signed PUT to a staging key, copy with the download headers, pre-signed GET, delete', async () => {
    const staged = key('staged')
    const objectKey = key('round-trip')
    const upload = await store.presignPut(staged, 'application/pdf', 60, new Date())
    expect(upload.headers).toEqual({ 'Content-Type': 'application/pdf' })
    const bytes = new Uint8Array([37, 80, 68, 70, 45, 49, 46, 55, 0, 255])
    expect((await fetch(upload.url, { method: 'PUT', headers: upload.headers, body: bytes })).status).toBe(
      200,
    )
    expect(await store.head(staged)).toEqual({ size: 10, contentType: 'application/pdf' })

    const copied = await store.copy(staged, objectKey, {
      contentType: 'application/pdf',
      contentDisposition: contentDisposition(GERMAN),
    })
    expect(copied).toEqual({ size: 10, contentType: 'application/pdf' })

    const download = await fetch(await store.presignGet(objectKey, 60, new Date()))
    expect(download.status).toBe(200)
    expect(new Uint8Array(await download.arrayBuffer())).toEqual(bytes)
    expect(download.headers.get('content-disposition')).toBe(
      `attachment; filename="Angebot f_r M_ller _ 2026 (final).pdf"; filename*=UTF-8''Angebot%20f%C3%BCr%20M%C3%BCller%20%E2%80%93%202026%20%28final%29.pdf`,
    )

    await store.delete(objectKey)
    expect(await store.head(objectKey)).toBeNull()
    await expect(store.delete(objectKey)).resolves.toBeUndefined()
  })

  it('deletes many objects in one call, missing ones included', async () => {
    const keys = Array.from({ length: 5 }, (_, i) => key(`many-${i}`))
    for (const key of keys) {
      await store.put(key, new TextEncoder().encode(key), {
        contentType: 'text/plain',
        contentDisposition: 'attachment',
      })
    }
    await store.deleteMany([...keys, key('never-stored')])
    for (const key of keys) expect(await store.head(key)).toBeNull()
    await expect(store.deleteMany([])).resolves.toBeUndefined()
  })

  it('answers null when copying an object that does not exist', async () => {
    expect(
      await store.copy(key('absent'), key('target'), {
        contentType: 'text/plain',
        contentDisposition: 'attachment',
      }),
    ).toBeNull()
  })

  it('stores bytes put by the service itself, served as an attachment', async () => {
    const objectKey = key('put')
    await store.put(objectKey, new TextEncoder().encode('%PDF-1.7'), {
      contentType: 'application/pdf',
      contentDisposition: contentDisposition('report.pdf'),
    })
    expect(await store.head(objectKey)).toEqual({ size: 8, contentType: 'application/pdf' })
    const download = await fetch(await store.presignGet(objectKey, 60, new Date()))
    expect(await download.text()).toBe('%PDF-1.7')
    expect(download.headers.get('content-disposition')).toMatch(/^attachment; filename="report.pdf"/)
  })

  it('answers null for an object that does not exist', async () => {
    expect(await store.head(key('missing'))).toBeNull()
  })

  it('signs PUT addresses without checksum parameters, with the Content-Type signed', async () => {
    const signingDate = new Date('2026-03-04T05:06:07Z')
    const url = new URL((await store.presignPut(key('checksum'), 'application/pdf', 900, signingDate)).url)
    const names = [...url.searchParams.keys()].map((name) => name.toLowerCase())
    expect(names.filter((name) => name.startsWith('x-amz-checksum'))).toEqual([])
    expect(names).not.toContain('x-amz-sdk-checksum-algorithm')
    expect(url.searchParams.get('X-Amz-SignedHeaders')?.split(';')).toContain('content-type')
    expect(url.searchParams.get('X-Amz-Date')).toBe('20260304T050607Z')
    expect(url.searchParams.get('X-Amz-Expires')).toBe('900')
  })

  it('refuses a PUT with another Content-Type than the signed one', async () => {
    const objectKey = key('type')
    const upload = await store.presignPut(objectKey, 'application/pdf', 60, new Date())
    const res = await fetch(upload.url, {
      method: 'PUT',
      headers: { 'Content-Type': 'text/html' },
      body: 'x',
    })
    expect(res.status).toBe(403)
    expect(await store.head(objectKey)).toBeNull()
  })

  it('takes the signing date from the caller, so an address signed in the past has expired', async () => {
    const objectKey = key('expired')
    const upload = await store.presignPut(objectKey, 'text/plain', 60, new Date(Date.now() - 120_000))
    const res = await fetch(upload.url, { method: 'PUT', headers: upload.headers, body: 'late' })
    expect(res.status).toBe(403)
    expect(await res.text()).toContain('Request has expired')
    expect(await store.head(objectKey)).toBeNull()
  })

  it('lets a browser on an allowed origin PUT cross-origin (CORS), and no other origin', async () => {
    const upload = await store.presignPut(key('cors'), 'text/plain', 60, new Date())
    const preflight = (origin: string) =>
      fetch(upload.url, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'PUT',
          'access-control-request-headers': 'content-type',
        },
      })
    const allowed = await preflight('http://app.example.test')
    expect(allowed.status).toBe(200)
    expect(allowed.headers.get('access-control-allow-methods')).toContain('PUT')
    expect(allowed.headers.get('access-control-allow-headers')).toBe('content-type')
    expect((await preflight('http://evil.example.test')).status).toBe(403)
  })

  it('is ready while the bucket is usable', async () => {
    await expect(store.ready()).resolves.toBeUndefined()
    // Again, now that the probe object exists.
    await expect(store.ready()).resolves.toBeUndefined()
  })

  it('is not ready when the bucket does not exist: the service never creates it', async () => {
    const missing = new S3ObjectStore({
      endpoint: server.endpoint,
      region: 'us-east-1',
      bucket: 'no-such-bucket',
      ...server.credentials,
      pathStyle: true,
    })
    try {
      await expect(missing.ready()).rejects.toThrow(/no-such-bucket/)
    } finally {
      await missing.close()
    }
  })

  it('is not ready with a wrong secret', async () => {
    const wrong = new S3ObjectStore({
      endpoint: server.endpoint,
      region: 'us-east-1',
      bucket: server.bucket,
      accessKeyId: server.credentials.accessKeyId,
      secretAccessKey: 'not-the-secret',
      pathStyle: true,
    })
    try {
      await expect(wrong.ready()).rejects.toThrow(/does not answer/)
    } finally {
      await wrong.close()
    }
  })
})

let s3: TestS3
let store: ObjectStore

beforeAll(async () => {
  s3 = await startTestS3({ allowedOrigins: ['http://app.example.test'] })
  store = s3.store()
})

afterAll(async () => {
  await store?.close()
  await s3?.close()
})

describe('the embedded server refuses what a real store refuses', () => {
  it("answers 403 to anonymous GET, PUT and list, and to s3rver's well-known S3RVER key", async () => {
    const objectKey = key('private')
    await store.put(objectKey, new TextEncoder().encode('tenant data'), {
      contentType: 'text/plain',
      contentDisposition: 'attachment',
    })
    const address = `${s3.endpoint}/${s3.bucket}/${objectKey}`
    const get = await fetch(address)
    expect(get.status).toBe(403)
    expect(await get.text()).toContain('<Code>AccessDenied</Code>')
    expect((await fetch(address, { method: 'PUT', body: 'replaced' })).status).toBe(403)
    const list = await fetch(`${s3.endpoint}/${s3.bucket}?list-type=2`)
    expect(list.status).toBe(403)
    expect(await list.text()).not.toContain(objectKey)
    const wellKnown = new S3ObjectStore({
      endpoint: s3.endpoint,
      region: 'us-east-1',
      bucket: s3.bucket,
      accessKeyId: 'S3RVER',
      secretAccessKey: 'S3RVER',
      pathStyle: true,
    })
    try {
      await expect(wellKnown.head(objectKey)).rejects.toThrow()
      await expect(
        wellKnown.put(objectKey, new Uint8Array(1), {
          contentType: 'text/plain',
          contentDisposition: 'attachment',
        }),
      ).rejects.toThrow()
    } finally {
      await wellKnown.close()
    }
    expect(await store.head(objectKey)).toEqual({ size: 11, contentType: 'text/plain' })
  })

  it('is not ready when nothing listens at the endpoint', async () => {
    const down = new S3ObjectStore({
      endpoint: `http://127.0.0.1:${await closedPort()}`,
      region: 'us-east-1',
      bucket: s3.bucket,
      ...s3.credentials,
      pathStyle: true,
    })
    try {
      await expect(down.ready()).rejects.toThrow(/does not answer/)
    } finally {
      await down.close()
    }
  })
})

describe('addresses for the public endpoint', () => {
  it('signs for the public host, which the store accepts there and nowhere else', async () => {
    const port = new URL(s3.endpoint).port
    const publicStore = new S3ObjectStore({
      endpoint: s3.endpoint,
      publicEndpoint: `http://localhost:${port}`,
      region: 'us-east-1',
      bucket: s3.bucket,
      ...s3.credentials,
      pathStyle: true,
    })
    try {
      const objectKey = key('public')
      const upload = await publicStore.presignPut(objectKey, 'text/plain', 60, new Date())
      expect(new URL(upload.url).host).toBe(`localhost:${port}`)
      // The host is signed: the same address sent to the internal name does not match.
      const internal = new URL(upload.url)
      internal.host = new URL(s3.endpoint).host
      const wrongHost = await fetch(internal, { method: 'PUT', headers: upload.headers, body: 'x' })
      expect(wrongHost.status).toBe(403)
      const res = await fetch(upload.url, { method: 'PUT', headers: upload.headers, body: 'public' })
      expect(res.status).toBe(200)
      // The service's own calls still go to the internal endpoint.
      expect(await publicStore.head(objectKey)).toEqual({ size: 6, contentType: 'text/plain' })
    } finally {
      await publicStore.close()
    }
  })
})

describe("pre-signed addresses are the SDK's own", () => {
  // The adapter asks getSignedUrl once where the bucket lives and signs each address itself with
  // the SDK's presigner: every address must be the one getSignedUrl gives, byte for byte in its
  // path and signature, whatever the addressing style, port, path prefix or key.
  const credentials = {
    accessKeyId: 'AKIDEXAMPLE',
    secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
  }
  const signingDate = new Date('2026-11-25T10:00:00Z')
  const keys = ['org/a/b/c', "odd key/ü (1)+it's*~!.pdf", 'uploads/org/x//y']

  async function sdkAddress(
    options: { endpoint: string; pathStyle: boolean },
    command: GetObjectCommand | PutObjectCommand,
    signed: string[],
  ): Promise<string> {
    const client = new S3Client({
      endpoint: options.endpoint,
      region: 'eu-central-1',
      forcePathStyle: options.pathStyle,
      credentials,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    })
    try {
      return await getSignedUrl(client, command, {
        expiresIn: 300,
        signingDate,
        signableHeaders: new Set(signed),
      })
    } finally {
      client.destroy()
    }
  }

  const parts = (address: string) => {
    const url = new URL(address)
    return { origin: url.origin, path: url.pathname, query: Object.fromEntries(url.searchParams) }
  }

  it.each([
    { endpoint: 'http://127.0.0.1:9000', pathStyle: true },
    { endpoint: 'https://storage.example.test', pathStyle: true },
    { endpoint: 'https://storage.example.test/s3-prefix', pathStyle: true },
    { endpoint: 'https://s3.eu-central-1.example.test', pathStyle: false },
    { endpoint: 'http://localhost:9000', pathStyle: false },
  ])('signs GET and PUT as getSignedUrl does ($endpoint, path style $pathStyle)', async (options) => {
    const store = new S3ObjectStore({
      ...options,
      region: 'eu-central-1',
      bucket: 'files-bucket',
      ...credentials,
    })
    try {
      for (const objectKey of keys) {
        const get = await store.presignGet(objectKey, 300, signingDate)
        const sdkGet = await sdkAddress(
          options,
          new GetObjectCommand({ Bucket: 'files-bucket', Key: objectKey }),
          [],
        )
        expect(parts(get)).toEqual(parts(sdkGet))
        const put = await store.presignPut(objectKey, 'application/pdf', 300, signingDate)
        const sdkPut = await sdkAddress(
          options,
          new PutObjectCommand({ Bucket: 'files-bucket', Key: objectKey, ContentType: 'application/pdf' }),
          ['content-type'],
        )
        expect(parts(put.url)).toEqual(parts(sdkPut))
      }
    } finally {
      await store.close()
    }
  })
})

describe('configuration', () => {
  it('requires platform.storage.s3.endpoint under the production profile', () => {
    const error = configErrorOf(() => createObjectStore(testConfig({ 'platform.profile': 'production' })))
    expect(error.property).toBe('platform.storage.s3.endpoint')
    expect(error.message).toContain('required under the production profile')
  })

  it('starts nothing itself outside production: without an endpoint the launcher must provide one', () => {
    const error = configErrorOf(() => createObjectStore(testConfig()))
    expect(error.property).toBe('platform.storage.s3.endpoint')
  })

  it('requires both halves of a key pair', () => {
    const error = configErrorOf(() =>
      createObjectStore(
        testConfig({
          'platform.storage.s3.endpoint': s3.endpoint,
          'platform.storage.s3.access-key-id': 'AKIA',
        }),
      ),
    )
    expect(error.property).toBe('platform.storage.s3.secret-access-key')
  })

  it('refuses an endpoint that is not http(s)', () => {
    const error = configErrorOf(() =>
      createObjectStore(testConfig({ 'platform.storage.s3.endpoint': 'ftp://files' })),
    )
    expect(error.property).toBe('platform.storage.s3.endpoint')
  })
})

describe('the launchers’ embedded server (startEmbeddedStorage)', () => {
  it('starts nothing when an endpoint is set or under production', async () => {
    expect(await startEmbeddedStorage(testConfig({ 'platform.storage.s3.endpoint': s3.endpoint }))).toBeNull()
    expect(await startEmbeddedStorage(testConfig({ 'platform.profile': 'production' }))).toBeNull()
  })

  it('keeps objects, its port and its key pair across restarts, with the bucket created by the launcher', async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-embedded-s3-'))
    try {
      const source = { 'platform.auth.jwt.secret': testSecret(), 'platform.data-dir': dataDir }
      const first = await startEmbeddedStorage(loadConfig(source))
      if (!first) throw new Error('expected an embedded server')
      const firstStore = createObjectStore(loadConfig({ ...source, ...first.configSource() }))
      await firstStore.ready()
      await firstStore.put('kept', new TextEncoder().encode('kept'), {
        contentType: 'text/plain',
        contentDisposition: 'attachment',
      })
      // An address signed before the restart.
      const signed = await firstStore.presignGet('kept', 600, new Date())
      await firstStore.close()
      await first.close()

      const second = await startEmbeddedStorage(loadConfig(source))
      if (!second) throw new Error('expected an embedded server')
      const secondStore = createObjectStore(loadConfig({ ...source, ...second.configSource() }))
      try {
        expect(await secondStore.head('kept')).toEqual({ size: 4, contentType: 'text/plain' })
        // Same port and key pair: the address signed before the restart still works.
        expect(second.endpoint).toBe(first.endpoint)
        expect(await (await fetch(signed)).text()).toBe('kept')
      } finally {
        await secondStore.close()
        await second.close()
      }
    } finally {
      await rm(dataDir, { recursive: true, force: true })
    }
  })

  it('lets a second process of the same data directory use the server the first one runs', async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'platform-embedded-s3-'))
    const source = { 'platform.auth.jwt.secret': testSecret(), 'platform.data-dir': dataDir }
    const first = await startEmbeddedStorage(loadConfig(source))
    try {
      if (!first) throw new Error('expected an embedded server')
      // Its port is taken by the first: the second finds the server there instead of failing.
      const second = await startEmbeddedStorage(loadConfig(source))
      if (!second) throw new Error('expected an embedded server')
      expect(second.endpoint).toBe(first.endpoint)
      const store = createObjectStore(loadConfig({ ...source, ...second.configSource() }))
      try {
        await store.ready()
        await store.put('shared', new TextEncoder().encode('shared'), {
          contentType: 'text/plain',
          contentDisposition: 'attachment',
        })
        expect(await store.head('shared')).toEqual({ size: 6, contentType: 'text/plain' })
      } finally {
        await store.close()
        await second.close()
      }
      // Closing the second leaves the first serving.
      const again = createObjectStore(loadConfig({ ...source, ...first.configSource() }))
      expect(await again.head('shared')).toEqual({ size: 6, contentType: 'text/plain' })
      await again.close()
    } finally {
      await first?.close()
      await rm(dataDir, { recursive: true, force: true })
    }
  })
})
