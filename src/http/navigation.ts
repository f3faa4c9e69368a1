// Telling a person's browser from a program, for the few routes a browser navigates to itself (an
// identity provider's redirect back): such a route answers a person with a page, not problem+json.
import accepts from 'accepts'
import type { FastifyRequest } from 'fastify'

/** What a refusal can be answered as; JSON first: the answer when the header prefers none (`*\/*`, none). */
const ANSWERS = ['application/json', 'application/problem+json', 'text/html']

/**
 * Whether the request is a browser's top-level navigation: `Sec-Fetch-Mode: navigate`, or an
 * Accept header that prefers text/html to JSON (browsers send `text/html,…,*\/*;q=0.8`). A client
 * that names JSON first, only `*\/*`, or no Accept at all is a program.
 */
export function isBrowserNavigation(request: FastifyRequest): boolean {
  if (request.headers['sec-fetch-mode'] === 'navigate') return true
  return accepts(request.raw).type(ANSWERS) === 'text/html'
}
