import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { afterAll, beforeAll, expect } from 'vitest'
import { ACCOUNT_TEST_CONFIG, asUser, newUser, type Session, signIn } from './accounts.ts'
import { createTestApp, type TestApp, type TestAppOptions } from './app.ts'
import { queueOwnedPurchaseRequest } from './authz.ts'
import { TestClock } from './clock.ts'
import { startTestS3, type TestS3 } from './s3.ts'

// Apps with the file feature against the embedded S3 server, and the resources files attach to.

export interface FilesTestApp extends TestApp {
  s3: TestS3
}

/**
 * A test app for the whole file with the file feature and its own embedded S3 server. Its clock
 * starts at the real time: the store checks the expiry of pre-signed addresses against real time.
 */
export function useFilesTestApp(options: TestAppOptions = {}): FilesTestApp {
  const holder = {} as FilesTestApp
  beforeAll(async () => {
    const s3 = await startTestS3()
    const t = await createTestApp({
      clock: new TestClock(new Date()),
      ...options,
      config: { ...ACCOUNT_TEST_CONFIG, ...s3.config, ...options.config },
    })
    Object.assign(holder, t, { s3 })
  })
  afterAll(async () => {
    await holder.close?.()
    await holder.s3?.close()
  })
  return holder
}

/** A purchase request owned by the organization: its ownership tuple written and delivered. */
export async function ownedResource(app: FastifyInstance, organizationId: string): Promise<string> {
  const id = await queueOwnedPurchaseRequest(app, organizationId)
  await app.authz.outbox.runOnce()
  return id
}

export interface Editor {
  organizationId: string
  userId: string
  session: Session
  resourceId: string
}

/** An organization admin (can_edit) signed in, with a purchase request of their organization. */
export async function newEditor(app: FastifyInstance): Promise<Editor> {
  const user = await newUser(app, { role: 'admin' })
  const resourceId = await ownedResource(app, user.organizationId)
  return {
    organizationId: user.organizationId,
    userId: user.id,
    session: await signIn(app, user),
    resourceId,
  }
}

export interface InitiateBody {
  resourceType?: string
  resourceId: string
  fileName?: string
  contentType?: string
}

/** The body of POST /api/storage/files: a PDF named quote.pdf on a purchase request, unless given. */
export function initiateBody(body: InitiateBody) {
  return { resourceType: 'purchase_request', fileName: 'quote.pdf', contentType: 'application/pdf', ...body }
}

/** The address that lists the files of a purchase request. */
export const filesOfUrl = (resourceId: string) =>
  `/api/storage/files?resourceType=purchase_request&resourceId=${resourceId}`

export function initiate(
  app: FastifyInstance,
  session: Session | null,
  body: InitiateBody,
): Promise<LightMyRequestResponse> {
  return asUser(app, session, { method: 'POST', url: '/api/storage/files', payload: initiateBody(body) })
}

export function confirm(app: FastifyInstance, session: Session | null, fileId: string) {
  return asUser(app, session, { method: 'POST', url: `/api/storage/files/${fileId}/confirm` })
}

export function downloadUrl(app: FastifyInstance, session: Session | null, fileId: string) {
  return asUser(app, session, { method: 'GET', url: `/api/storage/files/${fileId}/download-url` })
}

export function listFiles(app: FastifyInstance, session: Session | null, resourceId: string) {
  return asUser(app, session, { method: 'GET', url: filesOfUrl(resourceId) })
}

export interface Upload {
  fileId: string
  uploadUrl: string
  expiresAt: string
  uploadHeaders: Record<string, string>
}

/** Initiates an upload and fails the test unless it is 201. */
export async function initiated(
  app: FastifyInstance,
  session: Session | null,
  body: InitiateBody,
): Promise<Upload> {
  const res = await initiate(app, session, body)
  expect(res.statusCode, res.body).toBe(201)
  return res.json() as Upload
}

/** PUTs the bytes to the pre-signed address, as a browser would, with the signed headers. */
export function putBytes(upload: Upload, bytes: string | Uint8Array, headers?: Record<string, string>) {
  return fetch(upload.uploadUrl, { method: 'PUT', headers: headers ?? upload.uploadHeaders, body: bytes })
}
