import { randomBytes } from 'node:crypto'
import { hash, verify } from '@node-rs/argon2'

// `Algorithm.Argon2id` of @node-rs/argon2, a const enum that type stripping cannot inline.
const ARGON2ID = 2
const UNUSABLE = '!unusable!'

export interface HashParameters {
  memoryKib: number
  iterations: number
  parallelism: number
}

/** argon2id hashing with the configured cost, and the same work for accounts that do not exist. */
export class PasswordHasher {
  readonly #parameters: HashParameters
  readonly #dummyHash: string

  private constructor(parameters: HashParameters, dummyHash: string) {
    this.#parameters = parameters
    this.#dummyHash = dummyHash
  }

  static async create(parameters: HashParameters): Promise<PasswordHasher> {
    const dummy = await hash(randomBytes(32).toString('base64'), PasswordHasher.#options(parameters))
    return new PasswordHasher(parameters, dummy)
  }

  static #options(p: HashParameters) {
    return {
      algorithm: ARGON2ID,
      memoryCost: p.memoryKib,
      timeCost: p.iterations,
      parallelism: p.parallelism,
    }
  }

  /**
   * Passwords are hashed and verified in Unicode NFKC, so the same password typed on another
   * keyboard or system (composed or decomposed accents, full-width forms) matches (NIST 800-63B).
   */
  hash(password: string): Promise<string> {
    return hash(password.normalize('NFKC'), PasswordHasher.#options(this.#parameters))
  }

  /** Verifies against a stored hash; a malformed or unusable hash simply does not match. */
  async verify(storedHash: string, password: string): Promise<boolean> {
    try {
      return await verify(storedHash, password.normalize('NFKC'))
    } catch {
      return false
    }
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

  /** A hash no password matches: the stored value for invited accounts until they set one. */
  static unusableHash(): string {
    return `${UNUSABLE}${randomBytes(32).toString('base64url')}`
  }

  static isUnusable(storedHash: string): boolean {
    return storedHash.startsWith(UNUSABLE)
  }
}
