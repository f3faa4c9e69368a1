import type { Client } from 'openapi-fetch'
import type { PlatformClient, paths } from '../../client/src/index.ts'
import type { components, paths as ResourcePaths } from './resources.schema.ts'

// What every screen is given: the two typed clients (the platform's, and the one generated for the
// console's own resources with the platform's fetch), who is signed in, and navigation.

/** GET /api/auth/me: who is signed in, where, and how they sign in. */
export type Me = paths['/api/auth/me']['get']['responses'][200]['content']['application/json']

export type ResourceSchemas = components['schemas']
export type Resources = Client<ResourcePaths>

export interface ConsoleContext {
  platform: PlatformClient
  api: PlatformClient['api']
  resources: Resources
  readonly me: Me
  /**
   * Whether the organization's screens are shown: the role of the user's account record, as GET
   * /api/auth/me answers it (the record the service checks for `/api/users...` administration),
   * never a token claim or a permission check.
   */
  readonly isAdmin: boolean
  /** Asks /api/auth/me again (after a change to the user's sign-in) and updates the header. */
  refreshMe(): Promise<Me>
  /** Opens another screen (`#/users`). */
  navigate(hash: string): void
}

/** A screen of the console, made for the parts of its address after the screen's name. */
export type Screen = (context: ConsoleContext, params: string[]) => HTMLElement
