// The generic file endpoints: initiate an upload, confirm it, get a
// download address, list a resource's confirmed files. Bytes never pass through the service.
// Relations are checked on the resource the file belongs to (src/features/files/service.ts).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { problemResponses } from '../../errors.ts'
import { idempotentCreate } from '../../http/idempotency.ts'
import { requirePrincipal } from '../../principal.ts'
import {
  DownloadUrl,
  FileList,
  FileParams,
  FileRecord,
  fileLocation,
  InitiatedUpload,
  InitiateUploadRequest,
  ListFilesQuery,
  toFileRecord,
} from './schemas.ts'
import type { InitiatedUpload as InitiatedUploadResult } from './service.ts'

const filesRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(FileRecord)

  app.post(
    '',
    {
      config: { scope: 'files:write', idempotent: true },
      schema: {
        tags: ['files'],
        operationId: 'initiateUpload',
        summary: 'Start an upload: returns a pre-signed PUT address; needs can_edit on the resource',
        body: InitiateUploadRequest,
        response: { 201: InitiatedUpload, ...problemResponses(400, 401, 403, 503) },
      },
    },
    async (request, reply) => {
      const answer = (upload: InitiatedUploadResult) => ({
        status: 201,
        location: fileLocation(upload.file.id),
        body: {
          fileId: upload.file.id,
          uploadUrl: upload.uploadUrl,
          expiresAt: upload.expiresAt.toISOString(),
          uploadHeaders: upload.uploadHeaders,
        },
      })
      return idempotentCreate(request, reply, answer, (along) =>
        app.services.files.initiate(requirePrincipal(request), request.body, along),
      )
    },
  )

  app.post(
    '/:fileId/confirm',
    {
      config: { scope: 'files:write' },
      schema: {
        tags: ['files'],
        operationId: 'confirmUpload',
        summary:
          'Confirm an upload once the bytes are stored: CONFIRMED with its size (idempotent); 409 UPLOAD_NOT_FOUND before they are',
        params: FileParams,
        response: { 200: FileRecord, ...problemResponses(401, 403, 404, 409, 413, 503) },
      },
    },
    async (request) =>
      toFileRecord(await app.services.files.confirm(requirePrincipal(request), request.params.fileId)),
  )

  app.get(
    '/:fileId',
    {
      config: { scope: 'files:read' },
      schema: {
        tags: ['files'],
        operationId: 'getFile',
        summary: 'A file record in any status (PENDING, CONFIRMED, REJECTED); needs can_view on the resource',
        params: FileParams,
        response: { 200: FileRecord, ...problemResponses(401, 403, 404, 503) },
      },
    },
    async (request) =>
      toFileRecord(await app.services.files.get(requirePrincipal(request), request.params.fileId)),
  )

  app.get(
    '/:fileId/download-url',
    {
      config: { scope: 'files:read' },
      schema: {
        tags: ['files'],
        operationId: 'getDownloadUrl',
        summary: 'A pre-signed download address of a confirmed file; needs can_view on the resource',
        params: FileParams,
        response: { 200: DownloadUrl, ...problemResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { url, expiresAt } = await app.services.files.downloadUrl(
        requirePrincipal(request),
        request.params.fileId,
      )
      return { downloadUrl: url, expiresAt: expiresAt.toISOString() }
    },
  )

  app.get(
    '',
    {
      config: { scope: 'files:read' },
      schema: {
        tags: ['files'],
        operationId: 'listFiles',
        summary: "A resource's confirmed files, oldest first; needs can_view on the resource",
        querystring: ListFilesQuery,
        response: { 200: FileList, ...problemResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const { resourceType, resourceId } = request.query
      const files = await app.services.files.list(requirePrincipal(request), resourceType, resourceId)
      return { items: files.map(toFileRecord) }
    },
  )
}

export default filesRoutes
