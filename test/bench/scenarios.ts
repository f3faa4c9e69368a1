import type { Options } from 'autocannon'

export interface Scenario {
  name: string
  /** Which server answers: the bare baseline or the service. */
  target: 'bare' | 'app'
  path: string
  method?: Options['method']
  expectStatus: number
  /** Per-scenario preparation against the running service (seed data, log in); returns headers/body. */
  prepare?: (baseUrl: string) => Promise<Pick<Options, 'headers' | 'body'>>
}

// The scenarios of `npm run bench`. Features add theirs here.
export const scenarios: Scenario[] = [
  { name: 'bare Fastify route', target: 'bare', path: '/bare', expectStatus: 200 },
  { name: 'GET /health/live', target: 'app', path: '/health/live', expectStatus: 200 },
  {
    name: '401 on a protected route (no credentials)',
    target: 'app',
    path: '/api/auth/sessions',
    expectStatus: 401,
  },
]
