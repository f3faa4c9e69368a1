/** The one source of "now" for everything time-dependent, so tests move time instead of sleeping. */
export interface Clock {
  now(): Date
}

export const systemClock: Clock = { now: () => new Date() }

/** Seconds since the epoch, as JWT claims count them. */
export const epochSeconds = (clock: Clock): number => Math.floor(clock.now().getTime() / 1000)
