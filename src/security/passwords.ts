import { randomBytes } from 'node:crypto'
import { availableParallelism } from 'node:os'
import { hash, verify } from '@node-rs/argon2'
import pLimit, { type LimitFunction } from 'p-limit'
import type { Config } from '../config.ts'

// `Algorithm.Argon2id` of @node-rs/argon2, a const enum that type stripping cannot inline.
const ARGON2ID = 2
const UNUSABLE = '!unusable!'

export interface HashParameters {
  memoryKib: number
  iterations: number
  parallelism: number
}

/** The configured argon2id cost (`platform.auth.password.*`). */
export function hashParameters(password: Config['auth']['password']): HashParameters {
  return {
    memoryKib: password.hashMemoryKib,
    iterations: password.hashIterations,
    parallelism: password.hashParallelism,
  }
}

/** @node-rs/argon2's options for argon2id at this cost. */
export function argon2idOptions(p: HashParameters) {
  return { algorithm: ARGON2ID, memoryCost: p.memoryKib, timeCost: p.iterations, parallelism: p.parallelism }
}

/** The argon2 functions a hasher calls. */
type Argon2 = { hash: typeof hash; verify: typeof verify }

export interface HasherOptions {
  /**
   * How many hashes and verifications run at once; the others wait their turn in order. Default:
   * the cores available to the process (os.availableParallelism, which counts a container's CPU
   * quota): more at once would not finish sooner, but each holds its memory cost (19 MiB by
   * default) and a thread of libuv's pool, which file and DNS work share.
   */
  concurrency?: number
  /** The argon2 functions to call (@node-rs/argon2's); a test passes them wrapped to observe them. */
  argon2?: Argon2
}

/** argon2id hashing with the configured cost, and the same work for accounts that do not exist. */
export class PasswordHasher {
  readonly #parameters: HashParameters
  readonly #dummyHash: string
  readonly #limit: LimitFunction
  readonly #argon2: Argon2

  private constructor(parameters: HashParameters, dummyHash: string, limit: LimitFunction, argon2: Argon2) {
    this.#parameters = parameters
    this.#dummyHash = dummyHash
    this.#limit = limit
    this.#argon2 = argon2
  }

  static async create(parameters: HashParameters, options: HasherOptions = {}): Promise<PasswordHasher> {
    const argon2 = options.argon2 ?? { hash, verify }
    const dummy = await argon2.hash(randomBytes(32).toString('base64'), argon2idOptions(parameters))
    const limit = pLimit(options.concurrency ?? availableParallelism())
    return new PasswordHasher(parameters, dummy, limit, argon2)
  }

  /**
   * Passwords are hashed and verified in Unicode NFKC, so the same password typed on another
   * keyboard or system (composed or decomposed accents, full-width forms) matches (NIST 800-63B).
   */
  hash(password: string): Promise<string> {
    const normalized = password.normalize('NFKC')
    return this.#limit(() => this.#argon2.hash(normalized, argon2idOptions(this.#parameters)))
  }

  /**
   * Verifies against a stored hash. An unusable hash (an invitee's, who is inactive until it sets a
   * password) or a malformed one does not match, after a verification of the dummy hash: the same
   * work, and so the same time, as a wrong password, whatever account holds it.
   */
  async verify(storedHash: string, password: string): Promise<boolean> {
    const normalized = password.normalize('NFKC')
    if (!PasswordHasher.isUnusable(storedHash)) {
      try {
        return await this.#limit(() => this.#argon2.verify(storedHash, normalized))
      } catch {
        // A hash argon2 cannot read: answered below, with the dummy's work.
      }
    }
    await this.#limit(() => this.#argon2.verify(this.#dummyHash, normalized)).catch(() => false)
    return false
  }

  /** Spends the same effort as a real verification, for unknown accounts (no timing oracle). */
  async verifyNothing(password: string): Promise<void> {
    await this.verify(this.#dummyHash, password)
  }

  /** True when a stored hash was made with other parameters than the configured ones. */
  needsRehash(storedHash: string): boolean {
    const match = /^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$/.exec(storedHash)
    if (!match) return true
    const p = this.#parameters
    return (
      Number(match[1]) !== p.memoryKib ||
      Number(match[2]) !== p.iterations ||
      Number(match[3]) !== p.parallelism
    )
  }

  /** What every unusable hash starts with, for statements that tell invited accounts apart. */
  static readonly UNUSABLE_PREFIX = UNUSABLE

  /** A hash no password matches: the stored value for invited accounts until they set one. */
  static unusableHash(): string {
    return `${UNUSABLE}${randomBytes(32).toString('base64url')}`
  }

  static isUnusable(storedHash: string): boolean {
    return storedHash.startsWith(UNUSABLE)
  }
}
