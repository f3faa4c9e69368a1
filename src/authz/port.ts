// The authorization port: what the service asks of a relationship-based authorization server
// (OpenFGA's API). Two adapters implement it: OpenFGA over HTTP and the embedded
// evaluator over tuples in PostgreSQL; both pass the same contract suite.

/** A relationship tuple, in OpenFGA's terms: `user` (a subject such as `user:<id>`,
 * `organization:<id>` or a userset `organization:<id>#member`), `relation`, `object` (`type:id`). */
export interface TupleKey {
  user: string
  relation: string
  object: string
}

export interface CheckRequest extends TupleKey {
  /**
   * Answer from the tuples as they are now, past any cache of the server's (OpenFGA's check caches
   * answer from what they saw up to their TTL ago). For a question asked again right after a change
   * it depends on was delivered; it costs the server more than a plain check.
   */
  fresh?: boolean | undefined
}

export interface AuthorizationPort {
  /** Whether `user` has `relation` on `object` under the model. */
  check(request: CheckRequest): Promise<boolean>
  /** Writes and deletes tuples. Idempotent: writing an existing tuple or deleting a missing one is no error. */
  write(writes: TupleKey[], deletes: TupleKey[]): Promise<void>
  /** Resolves when the server answers (readiness). */
  ready(): Promise<void>
  close(): Promise<void>
}

/** The authorization server cannot answer: callers fail closed (503), never allow. */
export class AuthorizationUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'AuthorizationUnavailableError'
  }
}

/** A request the model cannot express (unknown type or relation, malformed tuple). */
export class AuthorizationRequestError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'AuthorizationRequestError'
  }
}
