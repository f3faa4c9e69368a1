// The security headers of every response (`securityHeaders(config)`), computed once at start-up by
// running helmet against a recorder.
import type { IncomingMessage, ServerResponse } from 'node:http'
import helmet from 'helmet'
import type { Config } from '../config.ts'

/**
 * The API answers JSON only, so its policy allows nothing to load and no page to frame it; Swagger
 * UI sets its own policy for its pages (src/http/docs.ts). HSTS only where cookies are Secure, i.e.
 * the deployment is served over HTTPS. Nothing in the policy depends on the request, so helmet runs
 * once, at start-up, and every response gets the headers it set (running its middleware chain per
 * request cost ~12 µs).
 */
export function securityHeaders(config: Config): Readonly<Record<string, string>> {
  const middleware = helmet({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: {
        defaultSrc: ["'none'"],
        baseUri: ["'none'"],
        formAction: ["'none'"],
        frameAncestors: ["'none'"],
      },
    },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    strictTransportSecurity: config.auth.cookie.secure
      ? { maxAge: 31_536_000, includeSubDomains: true }
      : false,
  })
  return Object.freeze(headersOf(middleware))
}

/** The headers a connect-style middleware sets on a response, by running it once against a recorder. */
function headersOf(
  middleware: (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void,
): Record<string, string> {
  const headers: Record<string, string> = {}
  const recorder = {
    setHeader: (name: string, value: unknown) => {
      headers[name.toLowerCase()] = String(value)
    },
    removeHeader: (name: string) => {
      delete headers[name.toLowerCase()]
    },
    getHeader: (name: string) => headers[name.toLowerCase()],
  }
  let outcome: { error?: unknown } | undefined
  middleware({ headers: {} } as IncomingMessage, recorder as unknown as ServerResponse, (error) => {
    outcome = { error }
  })
  if (!outcome || outcome.error)
    throw new Error('the security headers could not be computed', { cause: outcome?.error })
  return headers
}
