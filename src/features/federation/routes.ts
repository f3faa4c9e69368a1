// Sign-in with OpenID Connect providers under /api/auth/oidc (public: the provider list, a flow's
// start, the one callback, the second factor after it), and the signed-in user's linked
// identities under /api/account/identities.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Config } from '../../config.ts'
import { problemResponses } from '../../errors.ts'
import { refuseWhileImpersonating } from '../../http/impersonation.ts'
import { requireUser } from '../../principal.ts'
import { SessionResponse, sessionResponse, setSessionCookies, withSessionCookies } from '../sessions/index.ts'
import { FLOW_TTL_SECONDS, SECOND_FACTOR_TTL_SECONDS } from './flow.ts'
import type { FederatedIdentityRow } from './repository.ts'
import {
  CallbackQuery,
  IdentityList,
  IdentityParams,
  LinkRequest,
  LinkStart,
  ProviderList,
  ProviderParams,
  Redirect,
  SecondFactorBody,
} from './schemas.ts'

const tags = ['authentication']
export const FLOW_COOKIE = 'oidc_flow'
export const SECOND_FACTOR_COOKIE = 'oidc_second_factor'
const COOKIE_PATH = '/api/auth/oidc'

/**
 * The flow's cookies: httpOnly, scoped to /api/auth/oidc, SameSite=Lax (the provider's redirect
 * back is a top-level navigation from another site, which Lax lets through).
 */
export function setFlowCookie(
  reply: FastifyReply,
  config: Config,
  name: string,
  value: string,
  maxAge: number,
) {
  reply.setCookie(name, value, {
    httpOnly: true,
    secure: config.auth.cookie.secure,
    sameSite: 'lax',
    path: COOKIE_PATH,
    maxAge,
  })
}

function clearFlowCookie(reply: FastifyReply, config: Config, name: string) {
  reply.clearCookie(name, {
    httpOnly: true,
    secure: config.auth.cookie.secure,
    sameSite: 'lax',
    path: COOKIE_PATH,
  })
}

const client = (request: FastifyRequest) => ({
  userAgent: (request.headers['user-agent'] as string | undefined) ?? null,
  ipAddress: request.ip,
})

const signInLimits = [
  { name: 'oidc:ip', by: 'ip' as const, max: 'loginPerMinute' as const, window: 'minute' as const },
]

export const oidcRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, clock } = app
  const federation = app.services.federation
  const frontend = (path: string) => new URL(path, config.web.frontendUrl).href

  app.get(
    '/providers',
    {
      config: { public: true },
      schema: {
        tags,
        operationId: 'listOidcProviders',
        summary: 'The deployment-wide OpenID Connect providers, for the sign-in page’s buttons',
        response: { 200: ProviderList },
      },
    },
    async () => ({ items: config.auth.oidc.providers.map(({ id, name }) => ({ id, name })) }),
  )

  app.get(
    '/:providerId/start',
    {
      config: { public: true, rateLimit: signInLimits },
      schema: {
        tags,
        operationId: 'startOidcSignIn',
        summary: 'Start signing in with a provider: redirects the browser to it',
        description:
          'Answers 302 to the provider’s authorization endpoint (authorization code flow, PKCE S256) and sets the flow ' +
          'cookie (httpOnly, path /api/auth/oidc, ten minutes) that binds the state and nonce to this browser. 404 ' +
          'NOT_FOUND for an unknown provider; 503 SERVICE_UNAVAILABLE when the provider’s discovery document cannot ' +
          'be fetched.',
        params: ProviderParams,
        response: { 302: Redirect('To the provider'), ...problemResponses(404, 429, 503) },
      },
    },
    async (request, reply) => {
      const ref = { kind: 'platform', id: request.params.providerId }
      const { redirectUrl, handle } = await federation.start(ref, { purpose: 'sign_in' })
      setFlowCookie(reply, config, FLOW_COOKIE, handle, FLOW_TTL_SECONDS)
      return reply.header('cache-control', 'no-store').redirect(redirectUrl, 302)
    },
  )

  app.get(
    '/callback',
    {
      config: {
        public: true,
        rateLimit: signInLimits,
        // A person's browser comes back to the frontend with the refusal's code, never its detail: a
        // signed-in browser (a link, or a sign-in from a signed-in console) to the account screen.
        navigationRefusal: (request, code) =>
          frontend(`/?oidc=error&code=${code}${request.principal?.type === 'USER' ? '#account' : ''}`),
      },
      schema: {
        tags,
        operationId: 'oidcCallback',
        summary: 'The redirect URI of every provider and organization connection',
        description:
          'Finishes the flow the flow cookie names (once). A sign-in sets the session cookies and redirects to ' +
          '`<frontend>/?oidc=signed-in`; when the account has a second factor it instead sets a five-minute cookie and redirects to ' +
          '`<frontend>/?oidc=second-factor`, where POST /api/auth/oidc/second-factor finishes it. A link redirects to ' +
          '`<frontend>/#account`. 400 OIDC_STATE_INVALID: no live flow for this browser, another state, or a flow ' +
          'already used. 401 OIDC_RESPONSE_INVALID: the provider’s answer failed a check (error answer, missing or ' +
          'wrong `iss`, the code exchange, the ID token’s signature, issuer, audience, expiry or nonce). 403 ' +
          'OIDC_EMAIL_UNVERIFIED: a new identity whose email the provider did not verify. 403 SIGN_UP_DISABLED: no ' +
          'account has the address and sign-up is off. 409 IDENTITY_NOT_LINKED: an account has the address, but this ' +
          'identity is not linked to it (link it while signed in). 403 ACCESS_DENIED: a link flow finishing outside ' +
          'the session that started it. 409 IDENTITY_ALREADY_LINKED: linking an identity another account holds. ' +
          '404 NOT_FOUND: the provider the flow was started for is no longer configured. 403 SSO_REQUIRED: the ' +
          "organization's security.sso-required refuses a sign-in through a provider that is not its own " +
          "connection. 403 IP_NOT_ALLOWED: the organization's security.ip-allowlist leaves out this address. " +
          "403 SSO_DOMAIN_NOT_VERIFIED: through an organization's connection, an address at a domain that " +
          'organization has not verified. 403 SSO_ACCOUNT_IN_OTHER_ORGANIZATION: through an organization’s ' +
          'connection, an address whose account belongs to another organization. ' +
          'These refusals (and 429, 503) are problem+json for a program; a browser’s navigation ' +
          '(`Sec-Fetch-Mode: navigate`, or an Accept that prefers text/html to JSON) is instead redirected (302, no ' +
          'session cookie set) to `<frontend>/?oidc=error&code=<CODE>`, or ' +
          '`<frontend>/?oidc=error&code=<CODE>#account` when it came with a session (a link), carrying the code ' +
          'only: never the detail nor anything the provider sent. An unexpected failure (500) is problem+json for both.',
        querystring: CallbackQuery,
        response: {
          302: Redirect(
            'To the frontend: signed in, waiting for the second factor, linked, or refused (`?oidc=error&code=`)',
          ),
          ...problemResponses(400, 401, 403, 404, 409, 429, 503),
        },
      },
    },
    async (request, reply) => {
      const handle = request.cookies[FLOW_COOKIE]
      clearFlowCookie(reply, config, FLOW_COOKIE)
      const principal = request.principal?.type === 'USER' ? request.principal : null
      const query = request.url.includes('?') ? request.url.slice(request.url.indexOf('?') + 1) : ''
      const outcome = await federation.callback(handle, query, principal)
      reply.header('cache-control', 'no-store')
      if (outcome.kind === 'linked') return reply.redirect(frontend('/#account'), 302)
      if (outcome.kind === 'second_factor') {
        setFlowCookie(reply, config, SECOND_FACTOR_COOKIE, outcome.handle, SECOND_FACTOR_TTL_SECONDS)
        return reply.redirect(frontend('/?oidc=second-factor'), 302)
      }
      const session = await app.services.sessions.start(outcome, client(request), outcome.signInMethod, {
        organizationConnection: outcome.organizationConnection,
      })
      app.background.run('new-device-check', () =>
        app.services.newDeviceNotice.onLogin(outcome.userId, client(request)),
      )
      setSessionCookies(reply, config, session, clock.now())
      return reply.redirect(frontend('/?oidc=signed-in'), 302)
    },
  )

  app.post(
    '/second-factor',
    {
      config: {
        public: true,
        rateLimit: [
          { name: 'login:ip', by: 'ip', max: 'loginPerMinute', window: 'minute', failuresOnly: true },
        ],
      },
      schema: {
        tags,
        operationId: 'completeOidcSignIn',
        summary: 'Finish a provider sign-in with the account’s second factor; sets the session cookies',
        description:
          'Needs the cookie the callback set (five minutes). Counts toward the account’s lockout as a login does. 400 ' +
          'OIDC_STATE_INVALID without a waiting sign-in; 401 OTP_REQUIRED, INVALID_OTP, PASSKEY_INVALID, ' +
          'ACCOUNT_LOCKED. A wrong code leaves the sign-in waiting; the right one spends it.',
        body: SecondFactorBody,
        response: { 200: withSessionCookies(SessionResponse), ...problemResponses(400, 401, 403, 429) },
      },
    },
    async (request, reply) => {
      const { otpCode, passkey } = request.body
      const user = await federation.completeSecondFactor(request.cookies[SECOND_FACTOR_COOKIE], {
        otpCode,
        passkey: passkey as never,
      })
      clearFlowCookie(reply, config, SECOND_FACTOR_COOKIE)
      const session = await app.services.sessions.start(user, client(request), user.signInMethod, {
        organizationConnection: user.organizationConnection,
      })
      setSessionCookies(reply, config, session, clock.now())
      return sessionResponse(session)
    },
  )
}

const identityRecord = (config: Config, row: FederatedIdentityRow) => {
  const id = row.provider_ref.startsWith('platform:') ? row.provider_ref.slice('platform:'.length) : null
  return {
    id: row.id,
    provider: row.provider_ref,
    providerName: config.auth.oidc.providers.find((each) => each.id === id)?.name ?? null,
    issuer: row.issuer,
    email: row.email,
    createdAt: row.created_at.toISOString(),
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
  }
}

export const identityRoutes: FastifyPluginAsyncTypebox = async (app) => {
  // An admin viewing as the user may list the linked identities, never link or unlink one.
  refuseWhileImpersonating(app, { reads: false })
  const { config } = app
  const federation = app.services.federation
  const identityTags = ['account']

  app.get(
    '',
    {
      schema: {
        tags: identityTags,
        operationId: 'listLinkedIdentities',
        summary: 'The provider identities linked to the signed-in user’s account',
        response: { 200: IdentityList, ...problemResponses(401, 403) },
      },
    },
    async (request) => {
      const user = requireUser(request)
      const rows = await federation.list(user.organizationId, user.userId)
      return { items: rows.map((row) => identityRecord(config, row)) }
    },
  )

  app.post(
    '/link',
    {
      schema: {
        tags: identityTags,
        operationId: 'startIdentityLink',
        summary: 'Start linking a provider identity to the signed-in account: the URL to navigate to',
        description:
          'Needs a session signed in to within the last five minutes (403 REAUTHENTICATION_REQUIRED). Sets the flow ' +
          'cookie; the flow finishes at the callback only in this same session, then the browser returns to ' +
          '`<frontend>/#account`. 404 NOT_FOUND for an unknown provider.',
        body: LinkRequest,
        response: { 200: LinkStart, ...problemResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request, reply) => {
      const user = requireUser(request)
      const { redirectUrl, handle } = await federation.start(
        { kind: 'platform', id: request.body.provider },
        { purpose: 'link', accountId: user.userId, sessionId: user.sessionId },
      )
      setFlowCookie(reply, config, FLOW_COOKIE, handle, FLOW_TTL_SECONDS)
      reply.header('cache-control', 'no-store')
      return { redirectUrl }
    },
  )

  app.delete(
    '/:identityId',
    {
      schema: {
        tags: identityTags,
        operationId: 'unlinkIdentity',
        summary: 'Unlink one of the signed-in user’s identities (another user’s: 404)',
        description:
          '409 LAST_SIGN_IN_METHOD when it is the account’s last way to sign in (no usable password, passkey, other ' +
          'identity, nor email sign-in on this service).',
        params: IdentityParams,
        response: { 204: Type.Null({ description: 'Unlinked' }), ...problemResponses(401, 403, 404, 409) },
      },
    },
    async (request, reply) => {
      const user = requireUser(request)
      await federation.unlink(user.organizationId, user.userId, request.params.identityId)
      return reply.code(204).send(null)
    },
  )
}
