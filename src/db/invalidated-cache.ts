import { LRUCache } from 'lru-cache'

/**
 * A cache that notifications empty (src/db/notifications.ts): of credentials' state dropped by
 * revocations, of an organization's configuration dropped by its changes. A value read while any
 * entry was dropped is used for that read but not kept: the statement may have read the row just
 * before the changing transaction committed, and its notification may already have been applied.
 */
export class InvalidatedCache<V extends NonNullable<unknown>> {
  readonly #entries: LRUCache<string, V>
  #generation = 0

  /** `ttl` in milliseconds; `maxSize` with `sizeCalculation` bounds the entries' total size. */
  constructor(options: {
    max: number
    ttl?: number
    maxSize?: number
    sizeCalculation?: (value: V) => number
  }) {
    this.#entries = new LRUCache<string, V>(options as LRUCache.Options<string, V, unknown>)
  }

  get(key: string): V | undefined {
    return this.#entries.get(key)
  }

  /** The cached value, or what `load` reads (kept unless an entry was dropped meanwhile). */
  async load(key: string, load: () => Promise<V>): Promise<V> {
    const cached = this.#entries.get(key)
    if (cached !== undefined) return cached
    const token = this.snapshot()
    const loaded = await load()
    this.setIfCurrent(token, key, loaded)
    return loaded
  }

  /** Taken before a read whose result is kept with `setIfCurrent`. */
  snapshot(): number {
    return this.#generation
  }

  /** Keeps a value read since `token`, unless an entry was dropped meanwhile. */
  setIfCurrent(token: number, key: string, value: V): void {
    if (token === this.#generation) this.#entries.set(key, value)
  }

  delete(key: string): void {
    this.#generation++
    this.#entries.delete(key)
  }

  /** Drops every entry whose value matches. */
  deleteWhere(matches: (value: V) => boolean): void {
    this.#generation++
    for (const [key, entry] of this.#entries.entries()) if (matches(entry)) this.#entries.delete(key)
  }

  clear(): void {
    this.#generation++
    this.#entries.clear()
  }

  get size(): number {
    return this.#entries.size
  }
}
