/** A first-come, first-served lock: `acquire` resolves, in call order, to the function that releases it. */
export class FifoLock {
  #tail: Promise<void> = Promise.resolve()

  async acquire(): Promise<() => void> {
    const previous = this.#tail
    let release: () => void = () => {}
    this.#tail = new Promise<void>((resolve) => {
      release = resolve
    })
    await previous
    let released = false
    return () => {
      if (released) return
      released = true
      release()
    }
  }

  /** Runs `work` while holding the lock. */
  async run<T>(work: () => Promise<T>): Promise<T> {
    const release = await this.acquire()
    try {
      return await work()
    } finally {
      release()
    }
  }

  /** Resolves once every holder so far has released it. */
  async drained(): Promise<void> {
    await this.#tail
  }
}
