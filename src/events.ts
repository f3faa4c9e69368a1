import type { FastifyBaseLogger } from 'fastify'

// In-process, typed events. Listeners run after the change that caused the event has
// committed; a failing listener is logged and never fails the request that published the event.

export interface PlatformEvents {
  UserSessionsRevokedEvent: { userId: string; reason: 'logout_all' | 'refresh_token_reuse_detected' }
}

export type EventName = keyof PlatformEvents
export type EventListener<K extends EventName> = (event: PlatformEvents[K]) => void | Promise<void>

export class EventBus {
  readonly #listeners = new Map<EventName, EventListener<EventName>[]>()
  #log: Pick<FastifyBaseLogger, 'error'> | undefined

  /** Where listener failures are reported; set by the app. */
  useLogger(log: Pick<FastifyBaseLogger, 'error'>): void {
    this.#log = log
  }

  on<K extends EventName>(name: K, listener: EventListener<K>): () => void {
    const list = this.#listeners.get(name) ?? []
    list.push(listener as EventListener<EventName>)
    this.#listeners.set(name, list)
    return () => {
      this.#listeners.set(
        name,
        (this.#listeners.get(name) ?? []).filter((l) => l !== listener),
      )
    }
  }

  async publish<K extends EventName>(name: K, event: PlatformEvents[K]): Promise<void> {
    for (const listener of this.#listeners.get(name) ?? []) {
      try {
        await listener(event)
      } catch (error) {
        this.#log?.error({ err: error, event: name }, 'event listener failed')
      }
    }
  }
}
