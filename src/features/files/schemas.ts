import { Type } from '@sinclair/typebox'
import { Uuid } from '../../uuid.ts'
import type { FileRow } from './repository.ts'

const DateTime = Type.String({ format: 'date-time' })
const ResourceType = Type.String({
  pattern: '^[a-z][a-z0-9_]{0,63}$',
  description: 'A registered resource type, for example purchase_request',
  examples: ['purchase_request'],
})

export const InitiateUploadRequest = Type.Object(
  {
    resourceType: ResourceType,
    resourceId: Uuid,
    fileName: Type.String({
      minLength: 1,
      maxLength: 1024,
      description:
        'Shown and used on download only; paths, controls and quotes are removed, 255 characters kept',
    }),
    contentType: Type.String({
      minLength: 3,
      maxLength: 255,
      description:
        'A type/subtype media type, optionally with a charset; the PUT must send it back as uploadHeaders says',
      examples: ['application/pdf'],
    }),
  },
  {
    additionalProperties: false,
    $id: 'InitiateUploadRequest',
    title: 'InitiateUploadRequest',
    description: 'The file to upload and the resource it belongs to',
  },
)

export const InitiatedUpload = Type.Object(
  {
    fileId: Uuid,
    uploadUrl: Type.String({ description: 'Pre-signed address: PUT the bytes here, with uploadHeaders' }),
    expiresAt: DateTime,
    uploadHeaders: Type.Record(Type.String(), Type.String(), {
      description: 'Headers the PUT must carry exactly (they are part of the signature)',
    }),
  },
  { $id: 'Upload', title: 'Upload', description: 'Where and how to PUT the bytes, until expiresAt' },
)

export const FileStatus = Type.Union(
  [Type.Literal('PENDING'), Type.Literal('CONFIRMED'), Type.Literal('REJECTED')],
  {
    $id: 'FileStatus',
    title: 'FileStatus',
    description: 'PENDING until confirmed; REJECTED over the size limit',
  },
)

export const FileRecord = Type.Object(
  {
    id: Uuid,
    fileId: Uuid,
    resourceType: Type.String(),
    resourceId: Type.String(),
    fileName: Type.String({ description: 'The sanitized original file name (same as originalFileName)' }),
    originalFileName: Type.String(),
    contentType: Type.String(),
    status: FileStatus,
    sizeBytes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
      description: 'Set at confirmation',
    }),
    createdAt: DateTime,
    confirmedAt: Type.Union([DateTime, Type.Null()]),
  },
  {
    $id: 'FileRecord',
    title: 'FileRecord',
    description: 'An uploaded file: its resource, name, type, size and state',
  },
)

export const FileParams = Type.Object({ fileId: Uuid })

export const ListFilesQuery = Type.Object(
  { resourceType: ResourceType, resourceId: Uuid },
  { additionalProperties: false },
)

export const FileList = Type.Object(
  { items: Type.Array(Type.Ref(FileRecord)) },
  { $id: 'FileList', title: 'FileList', description: "A resource's confirmed files, oldest first" },
)

export const DownloadUrl = Type.Object(
  {
    downloadUrl: Type.String({
      description: 'Pre-signed GET address; the response names the file (Content-Disposition)',
    }),
    expiresAt: DateTime,
  },
  { $id: 'DownloadUrl', title: 'DownloadUrl', description: 'A pre-signed download address, until expiresAt' },
)

/** The API shape of a file row; used by every route that answers with a file record. */
export function toFileRecord(row: FileRow) {
  return {
    id: row.id,
    fileId: row.id,
    resourceType: row.resource_type,
    resourceId: row.resource_id,
    fileName: row.original_file_name,
    originalFileName: row.original_file_name,
    contentType: row.content_type,
    status: row.status,
    sizeBytes: row.size_bytes === null ? null : Number(row.size_bytes),
    createdAt: row.created_at.toISOString(),
    confirmedAt: row.confirmed_at ? row.confirmed_at.toISOString() : null,
  }
}

/** The address of a file record, the Location of the answers that create one. */
export const fileLocation = (fileId: string) => `/api/storage/files/${fileId}`
