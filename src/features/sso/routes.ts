// An organization's single sign-on settings: connections and claimed email domains, managed by its
// admins (decided by the caller's account row; users only, no machine scope).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { AppError, problemResponses } from '../../errors.ts'
import { requireUser } from '../../principal.ts'
import { CONNECTION_KIND, FLOW_COOKIE, FLOW_TTL_SECONDS, setFlowCookie } from '../federation/index.ts'
import {
  AddSsoDomain,
  ConnectionParams,
  CreateSsoConnection,
  DomainParams,
  SsoConnection,
  SsoConnectionList,
  SsoDomain,
  SsoDomainList,
  SsoRedirect,
  SsoStart,
  UpdateSsoConnection,
} from './schemas.ts'

const tags = ['sso']
const Removed = Type.Null({ description: 'Removed' })

const ssoAdminRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.addSchema(SsoConnection)
  app.addSchema(SsoDomain)
  const sso = app.services.sso

  app.get(
    '/connections',
    {
      schema: {
        tags,
        operationId: 'listSsoConnections',
        summary: "The organization's identity provider connections; needs organization admin",
        response: { 200: SsoConnectionList, ...problemResponses(401, 403) },
      },
    },
    async (request) => sso.listConnections(requireUser(request)),
  )

  app.post(
    '/connections',
    {
      schema: {
        tags,
        operationId: 'createSsoConnection',
        summary:
          'Add an OpenID Connect connection (client secret sealed, never answered); needs organization admin',
        body: CreateSsoConnection,
        response: { 201: Type.Ref('SsoConnection'), ...problemResponses(400, 401, 403, 409) },
      },
    },
    async (request, reply) => {
      const created = await sso.createConnection(requireUser(request), request.body)
      return reply
        .code(201)
        .header('location', `/api/organizations/current/sso/connections/${created.id}`)
        .send(created)
    },
  )

  app.get(
    '/connections/:id',
    {
      schema: {
        tags,
        operationId: 'getSsoConnection',
        summary: 'One connection; needs organization admin',
        params: ConnectionParams,
        response: { 200: Type.Ref('SsoConnection'), ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => sso.getConnection(requireUser(request), request.params.id),
  )

  app.patch(
    '/connections/:id',
    {
      schema: {
        tags,
        operationId: 'updateSsoConnection',
        summary: "Change a connection's name, issuer, client or enabled state; needs organization admin",
        params: ConnectionParams,
        body: UpdateSsoConnection,
        response: { 200: Type.Ref('SsoConnection'), ...problemResponses(400, 401, 403, 404, 409) },
      },
    },
    async (request) => sso.updateConnection(requireUser(request), request.params.id, request.body),
  )

  app.delete(
    '/connections/:id',
    {
      schema: {
        tags,
        operationId: 'deleteSsoConnection',
        summary: 'Remove a connection; needs organization admin',
        params: ConnectionParams,
        response: { 204: Removed, ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      await sso.deleteConnection(requireUser(request), request.params.id)
      return reply.code(204).send(null)
    },
  )

  app.get(
    '/domains',
    {
      schema: {
        tags,
        operationId: 'listSsoDomains',
        summary: "The organization's claimed email domains and their TXT records; needs organization admin",
        response: { 200: SsoDomainList, ...problemResponses(401, 403) },
      },
    },
    async (request) => sso.listDomains(requireUser(request)),
  )

  app.post(
    '/domains',
    {
      schema: {
        tags,
        operationId: 'addSsoDomain',
        summary:
          'Claim an email domain (pending until its TXT record is seen; the same domain again answers 200 with the claim); needs organization admin',
        body: AddSsoDomain,
        response: {
          200: Type.Ref('SsoDomain'),
          201: Type.Ref('SsoDomain'),
          ...problemResponses(400, 401, 403, 409),
        },
      },
    },
    async (request, reply) => {
      const { created, domain } = await sso.addDomain(requireUser(request), request.body.domain)
      if (!created) return domain
      return reply
        .code(201)
        .header('location', `/api/organizations/current/sso/domains/${domain.domain}`)
        .send(domain)
    },
  )

  app.get(
    '/domains/:domain',
    {
      schema: {
        tags,
        operationId: 'getSsoDomain',
        summary: 'One claimed domain, its TXT record and status; needs organization admin',
        params: DomainParams,
        response: { 200: Type.Ref('SsoDomain'), ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request) => sso.getDomain(requireUser(request), request.params.domain),
  )

  app.post(
    '/domains/:domain/verify',
    {
      schema: {
        tags,
        operationId: 'verifySsoDomain',
        summary:
          'Look the TXT record up now: verified when it holds the challenge, pending otherwise; needs organization admin',
        params: DomainParams,
        response: { 200: Type.Ref('SsoDomain'), ...problemResponses(400, 401, 403, 404, 409) },
      },
    },
    async (request) => sso.verifyDomain(requireUser(request), request.params.domain),
  )

  app.delete(
    '/domains/:domain',
    {
      schema: {
        tags,
        operationId: 'removeSsoDomain',
        summary: 'Give up a claimed domain; needs organization admin',
        params: DomainParams,
        response: { 204: Removed, ...problemResponses(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      await sso.deleteDomain(requireUser(request), request.params.domain)
      return reply.code(204).send(null)
    },
  )
}

export default ssoAdminRoutes

/**
 * Identity-first sign-in: the address's domain decides. A domain an organization verified, with an
 * enabled connection, starts the OpenID Connect flow with that connection (its cookie set as the
 * provider buttons' start sets it); any other address is 404, whether or not an account has it, so
 * the answer tells which domains use SSO (public by nature: their sign-in page says so) and
 * nothing about users.
 */
export const ssoStartRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/start',
    {
      config: {
        public: true,
        rateLimit: [{ name: 'sso-start:ip', by: 'ip', max: 'loginPerMinute', window: 'minute' }],
      },
      schema: {
        tags: ['authentication'],
        operationId: 'startSsoSignIn',
        summary: "Sign in with SSO: the address's organization connection, as the URL to send the browser to",
        description:
          'Routes by the domain only: a domain an organization verified, with an enabled connection, answers the ' +
          'authorization URL of that connection and sets the flow cookie (httpOnly, path /api/auth/oidc, ten ' +
          'minutes); the flow ends at GET /api/auth/oidc/callback. Any other address is 404 NOT_FOUND, whether or ' +
          'not an account has it. 503 SERVICE_UNAVAILABLE when the identity provider cannot be reached.',
        body: SsoStart,
        response: { 200: SsoRedirect, ...problemResponses(400, 404, 429, 503) },
      },
    },
    async (request, reply) => {
      const connectionId = await app.services.ssoSignIns.route(request.body.email)
      if (!connectionId) throw new AppError('NOT_FOUND', "No single sign-on for this address's domain")
      const { redirectUrl, handle } = await app.services.federation.start(
        { kind: CONNECTION_KIND, id: connectionId },
        { purpose: 'sign_in' },
      )
      setFlowCookie(reply, app.config, FLOW_COOKIE, handle, FLOW_TTL_SECONDS)
      return reply.header('cache-control', 'no-store').send({ redirectUrl })
    },
  )
}
