import type { Clock } from '../../src/clock.ts'

/** A clock tests move by hand. */
export class TestClock implements Clock {
  #now: number
  constructor(start: Date | string = '2026-01-15T10:00:00.000Z') {
    this.#now = new Date(start).getTime()
  }
  now(): Date {
    return new Date(this.#now)
  }
  advance(ms: number): void {
    this.#now += ms
  }
  advanceSeconds(seconds: number): void {
    this.advance(seconds * 1000)
  }
}
