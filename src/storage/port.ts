// The object-store port (decisions 3): file bytes go straight between the browser and an
// S3-compatible store through pre-signed addresses; the service only signs, inspects and deletes.
// One adapter, S3 (src/storage/s3.ts), serves both a real store and the embedded server the
// launchers start (src/storage/embedded-s3.ts); both pass test/storage.contract.test.ts.

/** A pre-signed upload: PUT the bytes to `url` with exactly these headers, which are signed. */
export interface PresignedUpload {
  url: string
  headers: Record<string, string>
}

export interface ObjectInfo {
  size: number
  contentType: string | null
}

export interface ObjectStore {
  /** A PUT address for `key`, valid `expiresInSeconds` from `signingDate`; the Content-Type is signed. */
  presignPut(
    key: string,
    contentType: string,
    expiresInSeconds: number,
    signingDate: Date,
  ): Promise<PresignedUpload>
  /** A GET address for `key` whose response carries `Content-Disposition: attachment` with `fileName`. */
  presignGet(key: string, fileName: string, expiresInSeconds: number, signingDate: Date): Promise<string>
  /** The object's size and type, or null when there is no such object. */
  head(key: string): Promise<ObjectInfo | null>
  /** Deletes the object; deleting a missing object is not an error. */
  delete(key: string): Promise<void>
  /** Stores bytes the service produced itself (generated reports). */
  put(key: string, bytes: Uint8Array, contentType: string): Promise<void>
  /** Resolves when the bucket answers; the readiness check. */
  ready(): Promise<void>
  close(): Promise<void>
}

/** The store could not be reached or answered with an unexpected error. */
export class ObjectStoreError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'ObjectStoreError'
  }
}
