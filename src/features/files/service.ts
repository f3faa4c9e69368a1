import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import { type AuditTrail, actorOf } from '../../audit/index.ts'
import type { Permissions } from '../../authz/permissions.ts'
import type { Clock } from '../../clock.ts'
import type { Config } from '../../config.ts'
import { type AlongWith, inTransaction } from '../../db/database.ts'
import type { Database, Executor } from '../../db/schema.ts'
import { type TenantScope, tenantScope } from '../../db/tenant-scope.ts'
import { AppError, validationFailed } from '../../errors.ts'
import type { Principal } from '../../principal.ts'
import { contentDisposition, normalizeContentType, sanitizeFileName } from '../../storage/file-metadata.ts'
import { type ObjectStore, ObjectStoreError } from '../../storage/port.ts'
import {
  type FileRow,
  findFile,
  insertFile,
  listConfirmedFiles,
  markFileConfirmed,
  markFileRejected,
} from './repository.ts'

// Files attached to tenant resources. The bytes go straight between the
// client and the object store through pre-signed addresses; this service keeps the metadata,
// signs, and checks the result at confirm.
//
// Lifecycle:
//   initiate           -> PENDING    (row written, upload address signed for the staging key)
//   confirm, no bytes  -> PENDING    (409 UPLOAD_NOT_FOUND; the client retries once)
//   confirm, too large -> REJECTED   (objects deleted; 413 PAYLOAD_TOO_LARGE, again on every retry)
//   confirm            -> CONFIRMED  (staging copied to the file's key, size of the copy recorded)
//   never confirmed    -> removed    (row and staged bytes, by the `files` retention rule)
// Only CONFIRMED files are listed and downloadable.
//
// The upload address names a staging key (`uploads/<key>`), never the file's key: whoever holds
// the address can PUT again until it expires, but only a confirm copies bytes to the file's key,
// after checking them, so a confirmed file never changes and is never over the size limit. The copy
// stores the Content-Disposition (`attachment`, the sanitised name) with the object, so downloads
// need no per-request override.
//
// Authorization: a resource type is registered with the authorization object type that guards
// it; uploading and confirming need `can_edit` on that object, listing and downloading need
// `can_view`. The object's owner tuple ties it to one organization, so the check also keeps the
// caller inside their organization; files are additionally looked up by organization (a
// TenantScope in every statement), so a tuple written by mistake reaches no other organization's file.

export interface ResourceTypeDefinition {
  /** The authorization model type whose `can_view` / `can_edit` guard the resource's files. */
  objectType: string
  /** The media types (type/subtype, no parameters) files of this resource may have. */
  contentTypes: readonly string[]
}

export interface AuthorizationModelTypes {
  hasRelation(type: string, relation: string): boolean
}

export interface FileServiceOptions {
  audit: AuditTrail
  db: Kysely<Database>
  store: ObjectStore
  authz: Pick<Permissions, 'require'>
  model: AuthorizationModelTypes
  clock: Clock
  storage: Config['storage']
}

export interface InitiateUpload {
  resourceType: string
  resourceId: string
  fileName: string
  contentType: string
}

export interface InitiatedUpload {
  file: FileRow
  uploadUrl: string
  /** Headers the PUT must carry exactly as given (they are signed). */
  uploadHeaders: Record<string, string>
  expiresAt: Date
}

export interface GeneratedFile {
  resourceType: string
  resourceId: string
  fileName: string
  contentType: string
  bytes: Uint8Array
}

const RESOURCE_TYPE = /^[a-z][a-z0-9_]{0,63}$/
// Object keys are built from these only; a value outside them never reaches a key.
const KEY_SEGMENT = /^[A-Za-z0-9_-]{1,64}$/

export class FileService {
  readonly #audit: AuditTrail
  readonly #db: Kysely<Database>
  readonly #store: ObjectStore
  readonly #authz: Pick<Permissions, 'require'>
  readonly #model: AuthorizationModelTypes
  readonly #clock: Clock
  readonly #storage: Config['storage']
  readonly #types = new Map<string, ResourceTypeDefinition>()

  constructor(options: FileServiceOptions) {
    this.#audit = options.audit
    this.#db = options.db
    this.#store = options.store
    this.#authz = options.authz
    this.#model = options.model
    this.#clock = options.clock
    this.#storage = options.storage
  }

  /** Makes files attachable to a resource type; a feature registers its own when it is registered. */
  registerResourceType(name: string, definition: ResourceTypeDefinition): void {
    if (!RESOURCE_TYPE.test(name)) throw new Error(`resource type '${name}' must match ${RESOURCE_TYPE}`)
    if (this.#types.has(name)) throw new Error(`resource type '${name}' is already registered`)
    for (const relation of ['can_view', 'can_edit']) {
      if (!this.#model.hasRelation(definition.objectType, relation)) {
        throw new Error(`authorization type '${definition.objectType}' has no relation ${relation}`)
      }
    }
    if (definition.contentTypes.length === 0)
      throw new Error(`resource type '${name}' accepts no content type`)
    this.#types.set(name, { ...definition, contentTypes: [...definition.contentTypes] })
  }

  /** The registered resource type names. */
  resourceTypes(): string[] {
    return [...this.#types.keys()]
  }

  /**
   * Records a PENDING file and signs its upload address; needs `can_edit` on the resource. `along`
   * runs in the transaction that records the file, with the answer (only then is there one).
   */
  async initiate(
    principal: Principal,
    input: InitiateUpload,
    along?: AlongWith<InitiatedUpload>,
  ): Promise<InitiatedUpload> {
    const tenant = tenantScope()
    const definition = this.#definition(input.resourceType, 'body.resourceType')
    if (!KEY_SEGMENT.test(input.resourceId)) throw validationFailed('body.resourceId', 'is not a valid id')
    const contentType = normalizeContentType(input.contentType)
    if (!contentType) {
      throw validationFailed(
        'body.contentType',
        'must be a type/subtype media type, with no parameter other than charset',
      )
    }
    const essence = contentType.split(';')[0] as string
    if (!definition.contentTypes.includes(essence)) {
      throw new AppError(
        'UNSUPPORTED_CONTENT_TYPE',
        `Files of a ${input.resourceType} cannot be ${essence}; accepted: ${definition.contentTypes.join(', ')}`,
        {
          extensions: {
            errors: [{ path: 'body.contentType', message: 'is not accepted for this resource type' }],
          },
        },
      )
    }
    await this.#authz.require(principal, 'can_edit', `${definition.objectType}:${input.resourceId}`)

    const id = randomUUID()
    const key = objectKey(tenant.organizationId, input.resourceType, input.resourceId, id)
    const now = this.#clock.now()
    const ttl = this.#storage.uploadUrlTtl
    const upload = await this.#call(() => this.#store.presignPut(stagingKey(key), contentType, ttl, now))
    const record = async (db: Executor): Promise<InitiatedUpload> => ({
      file: await this.#record(db, principal, tenant, input, {
        id,
        key,
        contentType,
        now,
        confirmedSize: null,
      }),
      uploadUrl: upload.url,
      uploadHeaders: upload.headers,
      expiresAt: new Date(now.getTime() + ttl * 1000),
    })
    if (!along) return record(this.#db)
    return inTransaction(this.#db, async (trx) => {
      const initiated = await record(trx)
      await along(trx, initiated)
      return initiated
    })
  }

  /**
   * Checks that the bytes arrived and were not too large, copies them from the staging key to the
   * file's key and records the copy's size: CONFIRMED, or REJECTED over the size limit. Idempotent:
   * a CONFIRMED file is returned as it is. Needs `can_edit` on the resource.
   */
  async confirm(principal: Principal, fileId: string): Promise<FileRow> {
    const tenant = tenantScope()
    const file = await this.#authorizedFile(principal, tenant, fileId, 'can_edit')
    if (file.status === 'CONFIRMED') return file
    const staged = stagingKey(file.object_key)
    if (file.status === 'REJECTED') {
      // Deleting again finishes a cleanup an earlier confirm could not.
      await this.#discard(file)
      throw this.#tooLarge()
    }
    const upload = await this.#call(() => this.#store.head(staged))
    if (!upload) {
      throw new AppError('UPLOAD_NOT_FOUND', 'The file has not been uploaded yet; retry shortly')
    }
    // The staged bytes can still be replaced until the address expires: what counts is the copy,
    // which only the service writes, so its size is the one checked and recorded.
    const copied =
      upload.size > this.#storage.maxFileSize
        ? upload
        : await this.#call(() =>
            this.#store.copy(staged, file.object_key, {
              contentType: file.content_type,
              contentDisposition: contentDisposition(file.original_file_name),
            }),
          )
    if (!copied) throw new AppError('UPLOAD_NOT_FOUND', 'The file has not been uploaded yet; retry shortly')
    if (copied.size > this.#storage.maxFileSize) {
      const rejected = await markFileRejected(this.#db, tenant, file.id, copied.size)
      if (rejected || (await this.#reread(tenant, file.id)).status === 'REJECTED') {
        await this.#discard(file)
        throw this.#tooLarge()
      }
    } else {
      // The confirmation and its audit event commit together; only the confirm that wins records it.
      const confirmed = await inTransaction(this.#db, async (trx) => {
        const marked = await markFileConfirmed(trx, tenant, file.id, {
          sizeBytes: copied.size,
          now: this.#clock.now(),
        })
        if (marked) {
          await this.#audit.record(trx, {
            type: 'file.confirmed',
            organizationId: tenant.organizationId,
            actor: actorOf(principal),
            subject: { type: 'file', id: file.id },
            data: {
              resourceType: file.resource_type,
              resourceId: file.resource_id,
              contentType: file.content_type,
              sizeBytes: copied.size,
            },
          })
        }
        return marked
      })
      if (confirmed) {
        // Best effort: what is left is removed with the upload address's lifetime (README, Files).
        await this.#store.delete(staged).catch(() => undefined)
        return confirmed
      }
    }
    // Another confirm finished first: answer as it did.
    const current = await this.#reread(tenant, file.id)
    if (current.status === 'CONFIRMED') return current
    throw this.#tooLarge()
  }

  /** Deletes a file's staged and copied bytes. */
  async #discard(file: FileRow): Promise<void> {
    await this.#call(() => this.#store.delete(stagingKey(file.object_key)))
    await this.#call(() => this.#store.delete(file.object_key))
  }

  /** A file's record, whatever its status; needs `can_view` on the resource. */
  async get(principal: Principal, fileId: string): Promise<FileRow> {
    return this.#authorizedFile(principal, tenantScope(), fileId, 'can_view')
  }

  /** A pre-signed download address of a CONFIRMED file; needs `can_view` on the resource. */
  async downloadUrl(principal: Principal, fileId: string): Promise<{ url: string; expiresAt: Date }> {
    const file = await this.#authorizedFile(principal, tenantScope(), fileId, 'can_view')
    if (file.status !== 'CONFIRMED') throw new AppError('NOT_FOUND', 'No confirmed file with this id')
    const now = this.#clock.now()
    const ttl = this.#storage.downloadUrlTtl
    const url = await this.#call(() => this.#store.presignGet(file.object_key, ttl, now))
    return { url, expiresAt: new Date(now.getTime() + ttl * 1000) }
  }

  /** The CONFIRMED files of a resource, oldest first; needs `can_view` on the resource. */
  async list(principal: Principal, resourceType: string, resourceId: string): Promise<FileRow[]> {
    const tenant = tenantScope()
    const definition = this.#definition(resourceType, 'query.resourceType')
    await this.#authz.require(principal, 'can_view', `${definition.objectType}:${resourceId}`)
    return listConfirmedFiles(this.#db, tenant, resourceType, resourceId)
  }

  /**
   * The CONFIRMED files of a resource of the current organization, oldest first, asking nothing:
   * for a feature that has just checked `can_view` on the resource itself (a report), so that the
   * question is not asked twice.
   */
  async listOfCheckedResource(resourceType: string, resourceId: string): Promise<FileRow[]> {
    const tenant = tenantScope()
    this.#definition(resourceType, 'resourceType')
    return listConfirmedFiles(this.#db, tenant, resourceType, resourceId)
  }

  /**
   * Stores bytes the service produced (a generated report) as a CONFIRMED file of the current
   * organization. The caller has already authorized the operation that produces the file.
   */
  async storeGenerated(principal: Principal, input: GeneratedFile): Promise<FileRow> {
    const tenant = tenantScope()
    this.#definition(input.resourceType, 'resourceType')
    if (!KEY_SEGMENT.test(input.resourceId)) throw validationFailed('resourceId', 'is not a valid id')
    const contentType = normalizeContentType(input.contentType)
    if (!contentType) throw validationFailed('contentType', 'is not a valid media type')
    if (input.bytes.byteLength > this.#storage.maxFileSize) throw this.#tooLarge()
    const id = randomUUID()
    const key = objectKey(tenant.organizationId, input.resourceType, input.resourceId, id)
    await this.#call(() =>
      this.#store.put(key, input.bytes, {
        contentType,
        contentDisposition: contentDisposition(input.fileName),
      }),
    )
    const now = this.#clock.now()
    return this.#record(this.#db, principal, tenant, input, {
      id,
      key,
      contentType,
      now,
      confirmedSize: input.bytes.byteLength,
    })
  }

  /** Inserts a file row: PENDING until its size is known, CONFIRMED with it. */
  #record(
    db: Executor,
    principal: Principal,
    tenant: TenantScope,
    input: { resourceType: string; resourceId: string; fileName: string },
    file: { id: string; key: string; contentType: string; now: Date; confirmedSize: number | null },
  ): Promise<FileRow> {
    const confirmed = file.confirmedSize !== null
    return insertFile(db, tenant, {
      id: file.id,
      resource_type: input.resourceType,
      resource_id: input.resourceId,
      object_key: file.key,
      original_file_name: sanitizeFileName(input.fileName),
      content_type: file.contentType,
      status: confirmed ? 'CONFIRMED' : 'PENDING',
      size_bytes: file.confirmedSize,
      created_by: principal.id,
      created_at: file.now,
      confirmed_at: confirmed ? file.now : null,
    })
  }

  #definition(resourceType: string, path: string): ResourceTypeDefinition {
    const definition = this.#types.get(resourceType)
    if (!definition) {
      throw validationFailed(
        path,
        `is not a resource type files can be attached to (${this.resourceTypes().join(', ')})`,
      )
    }
    return definition
  }

  /** The file in the caller's organization (404 otherwise), once the relation on its resource is checked. */
  async #authorizedFile(
    principal: Principal,
    tenant: TenantScope,
    fileId: string,
    relation: 'can_view' | 'can_edit',
  ): Promise<FileRow> {
    const file = await findFile(this.#db, tenant, fileId)
    const definition = file ? this.#types.get(file.resource_type) : undefined
    if (!file || !definition) throw new AppError('NOT_FOUND', 'No file with this id')
    await this.#authz.require(principal, relation, `${definition.objectType}:${file.resource_id}`)
    return file
  }

  async #reread(tenant: TenantScope, fileId: string): Promise<FileRow> {
    const file = await findFile(this.#db, tenant, fileId)
    if (!file) throw new AppError('NOT_FOUND', 'No file with this id')
    return file
  }

  #tooLarge(): AppError {
    return new AppError(
      'PAYLOAD_TOO_LARGE',
      `The file is larger than the limit of ${this.#storage.maxFileSize} bytes and was discarded`,
    )
  }

  /** Runs a store call; an unreachable or failing store is 503, never a 500 with its details. */
  async #call<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation()
    } catch (error) {
      if (error instanceof ObjectStoreError) {
        throw new AppError('SERVICE_UNAVAILABLE', 'The object store is unavailable', {
          headers: { 'retry-after': '5' },
          cause: error,
        })
      }
      throw error
    }
  }
}

/** Where the upload address puts the bytes until a confirm copies them to the file's key. */
export const stagingKey = (key: string) => `uploads/${key}`

/** `org/<orgId>/<resourceType>/<resourceId>/<fileId>`: ids only, so no client value steers a key. */
export function objectKey(
  organizationId: string,
  resourceType: string,
  resourceId: string,
  fileId: string,
): string {
  for (const segment of [organizationId, resourceId, fileId]) {
    if (!KEY_SEGMENT.test(segment)) throw new Error(`'${segment}' cannot be part of an object key`)
  }
  if (!RESOURCE_TYPE.test(resourceType)) throw new Error(`'${resourceType}' cannot be part of an object key`)
  return `org/${organizationId}/${resourceType}/${resourceId}/${fileId}`
}
