/**
 * Asks `probe` until it is true (every `everyMs`), for conditions another process brings about: a
 * server back up, a message delivered. Resolves with the milliseconds it took; rejects, naming
 * `what`, after `withinMs`.
 */
export async function pollUntil(
  what: string,
  probe: () => Promise<boolean>,
  withinMs: number,
  everyMs = 20,
): Promise<number> {
  const started = Date.now()
  for (;;) {
    if (await probe()) return Date.now() - started
    if (Date.now() - started > withinMs) throw new Error(`${what}: not within ${withinMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}
