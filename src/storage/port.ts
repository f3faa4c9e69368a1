// The object-store port: file bytes go straight between the browser and an
// S3-compatible store through pre-signed addresses; the service only signs, inspects and deletes.
// One adapter, S3 (src/storage/s3.ts), serves both a real store and the embedded server the
// launchers start (src/storage/embedded-s3.ts); both pass test/storage.contract.test.ts.

/** A pre-signed upload: PUT the bytes to `url` with exactly these headers, which are signed. */
export interface PresignedUpload {
  url: string
  headers: Record<string, string>
}

/** What an object is served with. */
export interface StoredHeaders {
  contentType: string
  contentDisposition: string
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
  /**
   * A GET address for `key`. The response's Content-Disposition is the one stored with the object
   * (`copy`, `put`): no per-download override, whose signed characters stores canonicalise differently.
   */
  presignGet(key: string, expiresInSeconds: number, signingDate: Date): Promise<string>
  /** The object's size and type, or null when there is no such object. */
  head(key: string): Promise<ObjectInfo | null>
  /** Deletes the object; deleting a missing object is not an error. */
  delete(key: string): Promise<void>
  /** Deletes the objects, several at a time; missing ones are not an error. */
  deleteMany(keys: readonly string[]): Promise<void>
  /** Stores bytes the service produced itself (generated reports), with the headers they are served with. */
  put(key: string, bytes: Uint8Array, headers: StoredHeaders): Promise<void>
  /**
   * Copies `fromKey` to `toKey` inside the store, replacing its headers with `headers`; resolves to
   * the copy's size, or null when `fromKey` does not exist.
   */
  copy(fromKey: string, toKey: string, headers: StoredHeaders): Promise<ObjectInfo | null>
  /**
   * Resolves when the bucket is usable with the configured credentials (a probe object can be read
   * or written: HeadBucket needs a permission the service has no other use for, and some stores
   * answer it differently); the readiness check.
   */
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
